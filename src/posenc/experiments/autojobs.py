"""``posenc experiment NAME --jobs auto``: how many runs of a grid train at once.

On a CPU-only machine ``auto`` is ``min(cores // threads_per_job, cells)``. On a CUDA machine the
number is found by measurement while the grid trains: it starts with one run per visible GPU, and
each time every running run has shown its step rate over a measuring window, one more run per GPU
is allowed, as long as the grid's aggregate throughput (updates/s summed over the running runs,
read from each run's ``train.csv``) rose by more than ``min_gain`` over the previous level and the
cap allows (cores // threads per job, the cells left, the GPU memory one run was seen to use).
Where it stops rising the grid keeps the best level measured. :func:`next_jobs` is that decision
as a pure function of the measurements. GPU utilisation and memory are sampled while the grid runs
(:mod:`posenc.experiments.gpustat`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.experiments.progress import last_row

log = logging.getLogger("posenc")

#: A level is kept only if it beats the previous one by this fraction of its throughput.
MIN_GAIN = 0.10
#: Seconds every run of a level must keep logging steps before the level's throughput counts.
WINDOW_S = 30.0
#: Fraction of a GPU's memory the runs may fill when the cap is computed from memory.
MEMORY_FILL = 0.9


@dataclass(frozen=True)
class Limits:
    """What bounds ``--jobs auto``: ``cap`` runs at most, added ``step`` at a time (one per GPU),
    a level kept only when it beats the previous one by ``min_gain`` (a fraction)."""

    cap: int
    step: int = 1
    min_gain: float = MIN_GAIN


def next_jobs(measured: dict[int, float], limits: Limits) -> tuple[int, bool]:
    """The next number of concurrent runs and whether it is final, from ``measured``: aggregate
    updates/s per concurrency level tried so far (levels ``step, 2·step, ...``).

    Nothing measured: ``step`` (one run per GPU), not final. The last level beat the one before by
    more than ``min_gain`` (or is the first) and the cap leaves room: the last level + ``step``
    (clipped to the cap), not final. Otherwise: the measured level of the highest throughput, final."""
    first = max(1, min(limits.step, limits.cap))
    if not measured:
        return first, limits.cap <= first
    levels = sorted(measured)
    last = levels[-1]
    rising = len(levels) == 1 or measured[last] > measured[levels[-2]] * (1.0 + limits.min_gain)
    if rising and last < limits.cap:
        return min(last + max(1, limits.step), limits.cap), False
    return max(levels, key=lambda k: (measured[k], -k)), True


def job_cap(cores: int, threads_per_job: int, cells: int, gpus: int = 0,
            memory: tuple[float, float] | None = None) -> int:
    """The most runs at once: ``cores // threads_per_job`` and ``cells``, and on GPUs with
    ``memory = (MiB one run uses, MiB per GPU)`` as many runs per GPU as fill ``MEMORY_FILL`` of it."""
    cap = min(max(1, cores // max(1, threads_per_job)), max(1, cells))
    if gpus and memory is not None and memory[0] > 0:
        per_gpu = max(1, math.floor(MEMORY_FILL * memory[1] / memory[0]))
        cap = min(cap, per_gpu * gpus)
    return cap


def cpu_auto_jobs(cores: int, threads_per_job: int, cells: int) -> int:
    """``--jobs auto`` on a CPU-only machine: ``min(cores // threads_per_job, cells)``, at least 1."""
    return job_cap(cores, threads_per_job, cells)


@dataclass
class StepRates:
    """Each run's update rate as this process sees it: the times at which its ``train.csv`` first
    showed a new step (``run_dir(key)`` → its run directory)."""

    run_dir: Callable[[Any], Path]
    seen: dict[Any, list[tuple[float, int]]] = field(default_factory=dict)

    def observe(self, keys: list[Any], now: float) -> None:
        """Record the step each running run has logged, when it changed."""
        for key in keys:
            row = last_row(Path(self.run_dir(key)) / "train.csv")
            if row is None:
                continue
            step = int(float(row["step"]))
            marks = self.seen.setdefault(key, [])
            if not marks or step != marks[-1][1]:
                marks.append((now, step))

    def rate(self, key: Any, since: float) -> float | None:
        """Updates/s between the first and the last new step seen after ``since`` (None: fewer than two)."""
        marks = [m for m in self.seen.get(key, []) if m[0] >= since]
        if len(marks) < 2 or marks[-1][0] <= marks[0][0]:
            return None
        return (marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0])


class AutoJobs:
    """The slot limit of a CUDA grid under ``--jobs auto`` (called by the process pool after every
    poll with the running keys): measures each level's aggregate updates/s over ``window_s`` once
    every run of the level has logged a step, then moves to :func:`next_jobs`'s choice. A run that
    finishes inside a window restarts it (its replacement has to log first). ``memory()`` → (MiB
    used by the grid's runs on all GPUs, MiB per GPU) or None; it tightens the cap after a level.
    Once the level is final no train.csv is read again."""

    def __init__(self, limits: Limits, rates: StepRates, cores: int, threads: int, gpus: int,
                 memory: Callable[[], tuple[float, float] | None] = lambda: None,
                 window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self.rates, self.memory, self.window_s, self.clock = limits, rates, memory, window_s, clock
        self.cores, self.threads, self.gpus = cores, threads, gpus
        self.measured: dict[int, float] = {}
        self.jobs, self.final = next_jobs({}, limits)
        self.window: tuple[float, frozenset[Any]] | None = None  # (start, running keys)

    def __call__(self, keys: list[Any]) -> int:
        if self.final:  # decided: the logs are not read again
            return self.jobs
        now = self.clock()
        self.rates.observe(keys, now)
        members = frozenset(keys)
        ready = len(keys) >= self.jobs and all(self.rates.seen.get(k) for k in keys)
        if not ready or (self.window is not None and self.window[1] != members):
            self.window = (now, members) if ready else None
            return self.jobs
        if self.window is None:
            self.window = (now, members)
        elif now - self.window[0] >= self.window_s:
            rates = [self.rates.rate(k, self.window[0]) for k in keys]
            if all(r is not None for r in rates):
                self._settle_level(sum(r for r in rates if r is not None))
            self.window = None
        return self.jobs

    def _settle_level(self, throughput: float) -> None:
        """Record the running level's throughput, tighten the cap by memory, pick the next level."""
        self.measured[self.jobs] = throughput
        mem = self.memory()
        if mem is not None and self.jobs > 0:
            cap = job_cap(self.cores, self.threads, self.limits.cap, self.gpus, (mem[0] / self.jobs, mem[1]))
            self.limits = Limits(min(cap, self.limits.cap), self.limits.step, self.limits.min_gain)
        level = self.jobs
        self.jobs, self.final = next_jobs(self.measured, self.limits)
        print(f"--jobs auto: {level} runs at once: {throughput:.1f} updates/s in all; "
              + (f"keeping {self.jobs}" if self.final else f"trying {self.jobs}")
              + f" (cap {self.limits.cap})", flush=True)

    def summary(self) -> str:
        """One line: the throughput per level measured and the level chosen (or why none was)."""
        if not self.measured:
            return (f"--jobs auto: no level measured (runs did not log for {self.window_s:.0f} s each); "
                    f"ran {self.jobs} at once")
        levels = ", ".join(f"{k}: {v:.1f}" for k, v in sorted(self.measured.items()))
        verb = "chose" if self.final else "ended at"
        return f"--jobs auto: updates/s by runs at once {{{levels}}}; {verb} {self.jobs}"
