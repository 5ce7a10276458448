"""Run logs written by rank 0: CSV files, TensorBoard scalars and a tqdm progress bar, and the
training wall clock they record (:class:`WallClock`).

``train.csv``: step, epoch, loss, nll, ppl, lr, tokens, wall_s, tokens_per_s — loss/nll in nats
per target token over the rows' logging interval, ``tokens`` cumulative target tokens (all
ranks), ``tokens_per_s`` the interval's throughput. ``valid.csv``: step, loss, ppl, metric (the
task's ``train.metric_every`` metric, e.g. BLEU; empty when not computed), wall_s. ``wall_s`` is
training time (validation and checkpointing excluded), so validation perplexity/BLEU against steps
and against wall clock (SHAPE Fig. 8/9) can be plotted from valid.csv alone; :func:`read_valid`
reads it back (a run's validation curve, for every task's report and convergence status).
"""

from __future__ import annotations

import csv
import logging
import math
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from tqdm import tqdm

from posenc.files import naming_os_errors

log = logging.getLogger("posenc.training")

TRAIN_COLUMNS = ("step", "epoch", "loss", "nll", "ppl", "lr", "tokens", "wall_s", "tokens_per_s")
VALID_COLUMNS = ("step", "loss", "ppl", "metric", "wall_s")


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.8g}"
    return str(value)


class CsvLog:
    """Append-only CSV with a fixed header; :meth:`truncate_after` drops rows of a lost future.

    Args:
        path: the CSV file; created with the header row when missing or empty, else appended to.
        columns: the header, and the order of every row's values.
    """

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        self.path, self.columns = Path(path), columns
        if not self.path.exists() or self.path.stat().st_size == 0:
            with naming_os_errors(self.path), open(self.path, "w", newline="", encoding="utf-8") as fh:
                csv.writer(fh).writerow(columns)

    def write(self, row: dict[str, Any]) -> None:
        """Append one row.

        Args:
            row: values by column name; a column it lacks (or None) is written empty, a float with
                eight significant digits, a key that is no column is ignored.
        """
        with naming_os_errors(self.path), open(self.path, "a", newline="", encoding="utf-8") as fh:  # EFBIG: the log
            csv.writer(fh).writerow([_fmt(row.get(c)) for c in self.columns])

    def truncate_after(self, step: int) -> None:
        """Drop the rows written after a step, so a run resumed from a checkpoint logs its steps
        again without duplicates.

        Args:
            step: the step resumed from; rows whose first column is a step above it are dropped.
        """
        with open(self.path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
        kept = [r for r in rows[1:] if r and r[0].isdigit() and int(r[0]) <= step]
        with naming_os_errors(self.path), open(self.path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(self.columns)
            writer.writerows(kept)


def read_valid(run_dir: str | Path) -> list[dict[str, float]]:
    """A run's validation curve, as :class:`RunLogger` wrote it to ``valid.csv``.

    Args:
        run_dir: the run directory.

    Returns:
        One row per validation with a loss, as floats: ``step``, ``loss``, ``ppl`` (``exp(loss)``
        where the row has none) and ``wall_s`` (0 where the row has none); empty without a valid.csv.
    """
    path = Path(run_dir) / "valid.csv"
    if not path.is_file():
        return []
    rows = []
    with path.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("loss"):
                loss = float(row["loss"])
                ppl = float(row["ppl"]) if row.get("ppl") else math.exp(loss)
                rows.append({"step": float(row["step"]), "loss": loss, "ppl": ppl,
                             "wall_s": float(row.get("wall_s") or 0.0)})
    return rows


class RunLogger:
    """CSV + TensorBoard sink; every method is a no-op when ``enabled`` is False (rank > 0).

    Args:
        out_dir: the run directory: ``train.csv``, ``valid.csv`` and ``tensorboard/`` go there.
        enabled: whether this process logs (rank 0); when False nothing is created.
        resume_step: the step the run resumes from: rows and TensorBoard events after it are
            dropped; None for a fresh run.
    """

    def __init__(self, out_dir: Path, enabled: bool, resume_step: int | None = None) -> None:
        self.enabled = enabled
        self.train_csv = self.valid_csv = None
        self.writer = None
        if not enabled:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        self.train_csv = CsvLog(out_dir / "train.csv", TRAIN_COLUMNS)
        self.valid_csv = CsvLog(out_dir / "valid.csv", VALID_COLUMNS)
        if resume_step is not None:
            self.train_csv.truncate_after(resume_step)
            self.valid_csv.truncate_after(resume_step)
        from torch.utils.tensorboard import SummaryWriter  # slow import: only on rank 0

        self.writer = SummaryWriter(str(out_dir / "tensorboard"), purge_step=resume_step)

    def train(self, row: dict[str, Any]) -> None:
        """Log one training interval to ``train.csv`` and TensorBoard.

        Args:
            row: the interval's values by :data:`TRAIN_COLUMNS` name (``step`` and ``wall_s``
                required), ``gnorm`` too where known.
        """
        if not self.enabled:
            return
        self.train_csv.write(row)
        for key in ("loss", "nll", "ppl", "lr", "tokens_per_s", "gnorm"):
            if row.get(key) is not None:
                self.writer.add_scalar(f"train/{key}", row[key], row["step"])
        self.writer.add_scalar("train/wall_s", row["wall_s"], row["step"])

    def valid(self, row: dict[str, Any]) -> None:
        """Log one validation to ``valid.csv``, TensorBoard and one log line.

        Args:
            row: the validation's values by :data:`VALID_COLUMNS` name (``step`` required).
        """
        if not self.enabled:
            return
        self.valid_csv.write(row)
        for key in ("loss", "ppl", "metric"):
            if row.get(key) is not None:
                self.writer.add_scalar(f"valid/{key}", row[key], row["step"])
        fields = [f"{k}={_fmt(row[k])}" for k in VALID_COLUMNS[1:4] if row.get(k) is not None]
        log.info("step %d: %s", row["step"], " ".join(fields))

    def close(self) -> None:
        """Flush and close the TensorBoard writer (the CSV files are closed after every row)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class LogProgress:
    """Progress for output that is not a terminal: one log line after the first step of the
    session, then at most one every ``interval`` seconds, instead of tqdm's
    carriage-return bar. Same ``update``/``set_postfix``/``close`` interface as tqdm.

    Args:
        total: the step the run ends at, shown as ``step N/total``; None when unknown.
        initial: the step the session starts from.
        interval: the fewest seconds between two log lines.
    """

    def __init__(self, total: int | None, initial: int, interval: float = 30.0) -> None:
        self.total, self.step, self.interval = total, initial, interval
        self.postfix: dict[str, Any] = {}
        self._last: float | None = None  # time of the last line; None = none yet
        self._pending = False

    def update(self, n: int = 1) -> None:
        """Count steps. A line is due after the session's first step and once ``interval`` seconds
        have passed since the last; it is written by the next :meth:`set_postfix` (or the next
        call of any method).

        Args:
            n: the steps taken.
        """
        if self._pending:  # the previous step's line is still due (no postfix came)
            self._emit()
        self.step += n
        self._pending = self._last is None or time.monotonic() - self._last >= self.interval

    def set_postfix(self, **values: Any) -> None:
        """Set the values shown after the step (and write the line if one is due).

        Args:
            **values: ``name=value`` pairs, shown as ``name=value``.
        """
        self.postfix = values
        if self._pending:
            self._emit()

    def _emit(self) -> None:
        of = f"/{self.total}" if self.total else ""
        extra = "".join(f" {k}={v}" for k, v in self.postfix.items())
        log.info("step %d%s%s", self.step, of, extra)
        self._last, self._pending = time.monotonic(), False

    def close(self) -> None:
        """Write the line still due, if any."""
        if self._pending:
            self._emit()


def progress_bar(total: int | None, initial: int, enabled: bool) -> tqdm | LogProgress:
    """tqdm over optimizer steps on rank 0 when stderr is a terminal; otherwise (rank 0) log
    lines from the first step on (:class:`LogProgress`); nothing on other ranks.

    Args:
        total: the step the run ends at; None when unknown.
        initial: the step the session starts from.
        enabled: whether this process shows progress (rank 0).

    Returns:
        A tqdm bar (disabled when not ``enabled``), or a :class:`LogProgress`.
    """
    if enabled and not sys.stderr.isatty():
        return LogProgress(total, initial)
    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, disable=not enabled)


class WallClock:
    """Training wall clock: this session's time plus the resumed run's, minus the time spent
    validating and checkpointing (so curves vs wall clock compare training speed).

    Args:
        before: the training seconds of the run's earlier sessions (the resumed checkpoint's
            ``wall_s``); 0 for a fresh run. The clock starts when it is made.
    """

    def __init__(self, before: float = 0.0) -> None:
        self.start, self.before = time.perf_counter(), before
        self.overhead_s = 0.0  # validation/checkpoint time of this session
        self.pause_start: float | None = None

    def wall_s(self) -> float:
        """The run's training seconds so far.

        Returns:
            ``before`` plus this session's seconds, less the time spent paused (a pause in
            progress included).
        """
        now = time.perf_counter()
        paused = now - self.pause_start if self.pause_start is not None else 0.0
        return self.before + now - self.start - self.overhead_s - paused

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Exclude the block's duration from :meth:`wall_s` (nesting is allowed).

        Yields:
            Nothing: the ``with`` block runs with the clock paused.
        """
        if self.pause_start is not None:
            yield
            return
        self.pause_start = time.perf_counter()
        try:
            yield
        finally:
            self.overhead_s += time.perf_counter() - self.pause_start
            self.pause_start = None
