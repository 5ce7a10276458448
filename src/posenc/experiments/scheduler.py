"""Run grid cells concurrently: ``posenc experiment NAME --jobs N``.

Local backend: N worker processes at a time, each ``python -m posenc.experiments.worker`` on one
cell, so a crash or an out-of-memory error stays in its run. Slot ``k`` (0..N-1) is pinned to GPU
``visible[k % n_gpus]`` through ``CUDA_VISIBLE_DEVICES`` (``visible`` = the parent's
``CUDA_VISIBLE_DEVICES`` or every device), so N > n_gpus packs several small runs on each GPU and
every visible GPU is used. Each worker gets the run's ``train.num_threads`` CPU threads, or its
share ``cores // N`` when that is 0. ``--jobs auto``: N is ``min(cores // threads, cells)`` on a CPU,
and found by measurement on CUDA (:mod:`posenc.experiments.autojobs`); on CUDA the GPUs'
utilisation and memory are sampled to ``ROOT/logs/gpu.csv`` and summarised in one line at the end
(:mod:`posenc.experiments.gpustat`).
Each run logs to ``ROOT/logs/<group>-<method>-seed<N>.log`` (``<method>-seed<N>.log`` in a grid
without groups; the experiment spec is ``ROOT/logs/experiment.json``; ``logs/`` must be new,
empty or posenc's); a summary line is printed as each finishes, and while runs train each one's
step, validation loss and ETA (a status line on a
terminal, a line every 10 s otherwise: :mod:`posenc.experiments.progress`). Finished cells write
``results.json`` atomically, so an interrupted grid resumes run by run.

``submitit`` backend (optional ``pip install submitit``): the same cells handed to SLURM (or to
submitit's local executor when no SLURM is present) for grids larger than one machine.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from posenc.config import to_dict
from posenc.errors import ConfigError
from posenc.experiments.autojobs import AutoJobs, Limits, StepRates, cpu_auto_jobs, job_cap
from posenc.experiments.cell import results_path
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.gpustat import GpuMonitor, find_probe
from posenc.experiments.progress import Progress
from posenc.experiments.task_grid import TaskGrid
from posenc.files import atomic_write_text
from posenc.processes import Admit, SlotLimit, run_processes, usable_cores, visible_gpus

BACKENDS = ("local", "submitit")
AUTO = "auto"
#: ``--jobs``: a number of runs at once, or ``"auto"``.
Jobs = int | str


def parse_jobs(value: Jobs) -> Jobs:
    """``--jobs``: an int >= 1 or ``auto``; one-line ConfigError otherwise."""
    if value == AUTO:
        return AUTO
    try:
        jobs = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--jobs must be a number >= 1 or 'auto', got {value!r}") from None
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    return jobs


def check_logs_target(exp: Any) -> Path:
    """``<root>/logs`` (worker logs, the experiment spec, submitit's folder) must be new, empty or
    posenc's log directory: one-line RunDirError otherwise. Returns the directory, not created."""
    from posenc.runs.ownership import check_target

    logs = exp.root / "logs"
    check_target(logs, "logs", "log directory")
    return logs


def check_logs_dir(exp: Any) -> Path:
    """:func:`check_logs_target` before any run starts; returns the directory, created and marked."""
    from posenc.runs.ownership import write_marker

    logs = check_logs_target(exp)
    logs.mkdir(parents=True, exist_ok=True)
    write_marker(logs, "logs")
    return logs


def write_spec(exp: Any) -> Path:
    """The resolved experiment as JSON (with its ``task``) in the log directory, read by every
    worker (one source of truth per grid)."""
    spec = check_logs_dir(exp) / "experiment.json"
    atomic_write_text(spec, json.dumps(to_dict(exp), indent=2, default=str))
    return spec


def log_path(exp: Any, cell: tuple[str, str, int]) -> Path:
    """Where the worker of ``cell`` logs: ``<root>/logs/`` and the cell's :attr:`~Cell.log_name`."""
    return exp.root / "logs" / f"{Cell(*cell).log_name}.log"


def _finished(exp: Experiment, task: TaskGrid, cell: Cell, rc: int) -> str:
    """The line printed as a worker ends: the task's summary line, or where the failed run logged."""
    if rc != 0:
        return f"FAILED {Cell(*cell).label} (exit {rc}); see {log_path(exp, cell)}"
    return task.summary_line(exp, json.loads(results_path(exp.run_config(cell)).read_text(encoding="utf-8")))


def run_local(exp: Experiment, task: TaskGrid, cells: list[Cell], jobs: Jobs, poll_s: float = 0.2,
              admit: Admit | None = None, stop_at: float | None = None,
              after: Callable[[Cell, int], None] | None = None,
              dropped: Callable[[Cell], None] | None = None) -> list[Cell]:
    """Run ``cells`` with at most ``jobs`` worker processes (``python -m posenc.experiments.worker``;
    ``auto``: :func:`grid_slots`); returns the cells that failed. ``admit``, ``stop_at`` and
    ``dropped``: see :func:`~posenc.processes.run_processes` (a timed session's deadline);
    ``after(cell, returncode)`` is called as each worker ends, after its line is made."""
    spec = write_spec(exp.options)
    argv = lambda c: [sys.executable, "-m", "posenc.experiments.worker", str(spec), c[0], c[1], str(c[2])]  # noqa: E731
    work = [(cell, argv(cell), log_path(exp, cell)) for cell in cells]
    slots, threads, closing = grid_slots(exp, cells, jobs, visible_gpus(), usable_cores())

    def finished(cell: Cell, rc: int) -> str:
        line = _finished(exp, task, cell, rc)
        if after is not None:
            after(cell, rc)
        return line

    try:
        return run_processes(work, slots, finished, poll_s, progress_of(exp), threads=threads, admit=admit,
                             stop_at=stop_at, dropped=dropped)
    finally:
        for line in closing():
            print(line, flush=True)


def cell_train(exp: Experiment, cells: list[Cell], key: str, default: Any) -> list[Any]:
    """``train.<key>`` of each cell's run config (``default`` where a task's config has none)."""
    return [getattr(getattr(exp.run_config(c), "train", None), key, default) for c in cells]


def grid_slots(exp: Experiment, cells: list[Cell], jobs: Jobs, gpus: list[str],
               cores: int) -> tuple[int | SlotLimit, int, Callable[[], list[str]]]:
    """How a local grid runs: ``(slots, threads per worker, closing lines)``. ``slots`` is ``jobs``,
    or under ``auto`` ``min(cores // threads, cells)`` on a CPU and an :class:`AutoJobs` limit on
    CUDA (GPUs visible and not every cell on ``train.device=cpu``); there the GPUs are sampled to
    ``logs/gpu.csv`` and the closing lines summarise them (and the levels measured)."""
    threads = max([int(t or 0) for t in cell_train(exp, cells, "num_threads", 0)] + [0])
    on_cuda = bool(gpus) and any(d != "cpu" for d in cell_train(exp, cells, "device", "auto"))
    if not on_cuda:
        if jobs == AUTO:
            jobs = cpu_auto_jobs(cores, threads or 1, len(cells))
            print(f"--jobs auto: {jobs} runs at once (no GPU: min({cores} cores // {threads or 1} threads "
                  f"per run, {len(cells)} runs))", flush=True)
        return int(jobs), threads or max(1, cores // int(jobs)), list
    monitor = GpuMonitor(exp.root / "logs" / "gpu.csv", find_probe(gpus))
    auto = None
    if jobs == AUTO:
        limits = Limits(job_cap(cores, threads or 1, len(cells)), step=len(gpus))
        run_dir = lambda cell: Path(exp.run_config(cell).out_dir)  # noqa: E731
        auto = AutoJobs(limits, StepRates(run_dir), cores, threads or 1, len(gpus), partial(_memory, monitor))
    threads = threads or max(1, cores // (auto.limits.cap if auto else int(jobs)))

    def slots(keys: list[Any]) -> int:
        monitor.sample(len(keys))
        return auto(keys) if auto is not None else int(jobs)

    return slots, threads, lambda: [monitor.summary()] + ([auto.summary()] if auto is not None else [])


def _memory(monitor: GpuMonitor) -> tuple[float, float] | None:
    """(MiB used on all GPUs, MiB per GPU) from the latest sample; None where it has no memory figures."""
    taken = monitor.latest
    if not taken or any(s.memory_used is None or not s.memory_total for s in taken):
        return None
    return sum(s.memory_used or 0.0 for s in taken), min(s.memory_total or 0.0 for s in taken)


def progress_of(exp: Experiment) -> Progress:
    """Each running cell's step, validation loss and ETA from its run directory (experiments/progress.py)."""

    def cap(cell: Cell) -> int:
        return int(getattr(getattr(exp.run_config(cell), "train", None), "max_steps", 0) or 0)

    return Progress(lambda cell: Path(exp.run_config(cell).out_dir), cap, lambda c: Cell(*c).label)


def run_submitit(exp: Experiment, task: TaskGrid, cells: list[Cell], jobs: int, cluster: str | None = None,
                 parameters: dict[str, Any] | None = None) -> list[Cell]:
    """Hand ``cells`` to submitit (SLURM when available; ``cluster='local'``/``'debug'`` otherwise);
    each job looks the task up once (:func:`posenc.experiments.worker.execute`)."""
    try:
        import submitit
    except ImportError as exc:
        raise ConfigError("--backend submitit needs the submitit package (pip install submitit)") from exc
    from posenc.experiments.worker import execute

    executor = submitit.AutoExecutor(folder=check_logs_dir(exp) / "submitit", cluster=cluster)
    executor.update_parameters(**(parameters or {"timeout_min": 60, "slurm_array_parallelism": jobs}))
    submitted = [(cell, executor.submit(execute, exp.options, cell)) for cell in cells]
    failed = []
    for cell, job in submitted:
        try:
            job.result()
            print(_finished(exp, task, cell, 0), flush=True)
        except Exception as exc:
            print(f"FAILED {Cell(*cell).label}: "
                  f"{str(exc).splitlines()[-1] if str(exc) else exc!r}", flush=True)
            failed.append(cell)
    return failed


def run_cells(exp: Experiment, task: TaskGrid, cells: list[Cell], jobs: Jobs, backend: str = "local") -> None:
    """Bring ``cells`` up to date with ``jobs`` at once; one line per finished run; failures raise."""
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "local":
        failed = run_local(exp, task, cells, jobs)
    elif jobs == AUTO:
        raise ConfigError("--jobs auto needs --backend local (give submitit a number of runs at once)")
    else:
        failed = run_submitit(exp, task, cells, int(jobs))
    if failed:
        names = ", ".join(Cell(*cell).label for cell in failed)
        raise ConfigError(f"{len(failed)} run(s) failed: {names} (logs under {exp.root / 'logs'})")
