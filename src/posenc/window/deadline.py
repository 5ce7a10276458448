"""A timed session's deadline: a grid cell starts only while it can still finish before it.

A lent GPU comes for a fixed number of minutes. :class:`CellGate` admits a cell only when the time
left covers what one cell takes: the minutes recorded for the grid (a queue entry's
``cell_minutes``) until a cell of this session has finished, then the longest cell measured here.
A cell that is refused is never started (it stays for the next session); the process pool stops
the cells still running at the deadline itself (``stop_at`` of
:func:`posenc.processes.run_processes`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from posenc.experiments.progress import duration


@dataclass
class CellGate:
    """Admits cells while ``at`` (wall clock, :func:`time.time` seconds) is far enough away.

    ``recorded_s``: how long one cell is expected to take before any has finished here.
    :meth:`admit` is the pool's ``admit``; :meth:`done` records a finished cell's time."""

    at: float
    recorded_s: float
    clock: Callable[[], float] = time.time
    started: dict[Any, float] = field(default_factory=dict)
    measured: list[float] = field(default_factory=list)
    refused: list[Any] = field(default_factory=list)

    def left(self) -> float:
        """Seconds left before the deadline (negative once it has passed)."""
        return self.at - self.clock()

    def cell_seconds(self) -> float:
        """What one cell is expected to take: the longest measured here, else the recorded time."""
        return max(self.measured) if self.measured else self.recorded_s

    def fits(self) -> bool:
        """Whether a cell started now is expected to finish before the deadline."""
        return self.left() >= self.cell_seconds()

    def admit(self, key: Any) -> bool:
        """Start ``key`` now? Yes when :meth:`fits`; a refused key is remembered in ``refused``."""
        if not self.fits():
            self.refused.append(key)
            return False
        self.started[key] = self.clock()
        return True

    def done(self, key: Any) -> None:
        """``key`` finished (successfully): its wall time becomes a measurement."""
        start = self.started.pop(key, None)
        if start is not None:
            self.measured.append(self.clock() - start)

    def why_not(self) -> str:
        """Why cells are refused now: what one needs and what is left."""
        source = "measured" if self.measured else "recorded"
        return f"a cell needs ~{duration(self.cell_seconds())} ({source}), {duration(max(self.left(), 0.0))} left"
