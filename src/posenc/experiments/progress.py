"""What the running runs of a ``--jobs N`` grid are doing: each one's step, last
validation loss and estimated time left, read from its run directory's ``train.csv`` /
``valid.csv`` (the trainer appends a row per log interval and per validation, so nothing here
talks to the workers).

On a terminal the runs are one status line redrawn in place (``\\r``, a bar per run); otherwise a
plain line every ``interval_s`` seconds, so a log file shows progress too. The estimate is the
steps left to ``train.max_steps`` at the step rate of the rows this process has seen, timed by
their ``wall_s`` (patience may stop the run earlier, so it is an upper bound: ``ETA ≤``).
"""

from __future__ import annotations

import csv
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

BAR = 12  # characters of a run's bar


def _row_time(row: dict[str, str], now: float) -> float:
    """When a log row was written: its ``wall_s`` (the run's own clock), so that the rate does not
    fall while the log waits for its next row; ``now`` for a log without one."""
    try:
        return float(row["wall_s"])
    except (KeyError, TypeError, ValueError):
        return now


def last_row(path: Path) -> dict[str, str] | None:
    """The last complete row of a CSV log (None when there is none yet)."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("step")]
    except (OSError, csv.Error):
        return None
    return rows[-1] if rows else None


def duration(seconds: float) -> str:
    """``75`` → ``1m15s``; ``3700`` → ``1h01m``."""
    s = int(round(max(seconds, 0.0)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """``progress(keys)`` after every poll of the scheduler: ``keys`` are the running cells.

    ``run_dir(key)`` → the cell's run directory, ``cap(key)`` → its ``max_steps`` (0: none),
    ``name(key)`` → how the run is named in the line."""

    def __init__(self, run_dir: Callable[[Any], Path], cap: Callable[[Any], int], name: Callable[[Any], str],
                 stream: IO[str] | None = None, interval_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.run_dir, self.cap, self.name, self.clock = run_dir, cap, name, clock
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s if interval_s is not None else (1.0 if self.tty else 10.0)
        self.seen: dict[Any, tuple[float, int]] = {}  # key -> (time, step) of the first step observed
        self.last_print = -float("inf")
        self.drawn = False

    def status(self, key: Any, now: float) -> str:
        """One run's progress: ``shape/extrapolate/seed1 [####------] 1200/3000 valid 1.234 ETA ≤ 2m10s``."""
        folder = Path(self.run_dir(key))
        train, valid, cap = last_row(folder / "train.csv"), last_row(folder / "valid.csv"), self.cap(key)
        if train is None:
            return f"{self.name(key)} starting"
        step, at = int(float(train["step"])), _row_time(train, now)
        first = self.seen.setdefault(key, (at, step))
        rate = (step - first[1]) / (at - first[0]) if at > first[0] and step > first[1] else 0.0
        bar = f" [{'#' * int(BAR * min(step / cap, 1.0)):<{BAR}}]" if self.tty and cap else ""
        text = f"{self.name(key)}{bar} step {step}" + (f"/{cap}" if cap else "")
        if valid is not None and valid.get("loss"):
            text += f" valid {float(valid['loss']):.3f}"
        if cap and rate > 0:
            text += f" ETA ≤ {duration((cap - step) / rate)}"
        return text

    def __call__(self, keys: list[Any]) -> None:
        now = self.clock()
        if not keys or now - self.last_print < self.interval_s:
            return
        self.last_print = now
        line = " | ".join(self.status(k, now) for k in keys)
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r\033[K" + (line if len(line) <= width else line[: max(width - 1, 0)] + "…"))
            self.drawn = True
        else:
            self.stream.write(f"progress: {line}\n")
        self.stream.flush()

    def clear(self) -> None:
        """Erase the status line before another line is printed (a terminal only)."""
        if self.tty and self.drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.drawn = False
