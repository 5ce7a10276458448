"""Run grid cells concurrently: ``posenc experiment NAME --jobs N`` (issue 13, "concurrent grids").

Local backend: N worker processes at a time, each ``python -m posenc.experiments.worker`` on one
cell, so a crash or an out-of-memory error stays in its run. Slot ``k`` (0..N-1) is pinned to GPU
``visible[k % n_gpus]`` through ``CUDA_VISIBLE_DEVICES`` (``visible`` = the parent's
``CUDA_VISIBLE_DEVICES`` or every device), so N > n_gpus packs several small runs on each GPU and
every visible GPU is used. On a CPU the cores are split: each worker gets ``cores // N`` threads.
Each run logs to ``ROOT/logs/<setting>-<method>-seed<N>.log``; a summary line is printed as each
finishes. Finished cells write ``results.json`` atomically, so an interrupted grid resumes run by run.

``submitit`` backend (optional ``pip install submitit``): the same cells handed to SLURM (or to
submitit's local executor when no SLURM is present) for grids larger than one machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from posenc.config import to_dict
from posenc.errors import ConfigError
from posenc.experiments.cells import Cell, run_config
from posenc.experiments.config import ExperimentConfig

BACKENDS = ("local", "submitit")


def write_spec(exp: ExperimentConfig) -> Path:
    """The resolved experiment as JSON, read by every worker (one source of truth per grid)."""
    spec = exp.root / "logs" / "experiment.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps(to_dict(exp), indent=2, default=str), encoding="utf-8")
    return spec


def visible_gpus() -> list[str]:
    """GPU ids a worker may be pinned to ([] on a CPU-only machine)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d for d in env.split(",") if d.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no usable torch/CUDA: CPU workers
        return []


def worker_env(slot: int, jobs: int, gpus: list[str], cores: int | None = None) -> dict[str, str]:
    """Environment of the worker in ``slot``: its GPU (round robin) and its share of CPU threads."""
    env = dict(os.environ)
    threads = max(1, (cores or os.cpu_count() or 1) // jobs)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), POSENC_NUM_THREADS=str(threads))
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
    src = str(Path(__file__).resolve().parents[2])  # the posenc package this process runs
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def log_path(exp: ExperimentConfig, cell: Cell) -> Path:
    setting, method, seed = cell
    return exp.root / "logs" / f"{setting}-{method}-seed{seed}.log"


def _finished(exp: ExperimentConfig, cell: Cell, rc: int) -> str:
    from posenc.experiments.runner import summary_line

    if rc != 0:
        return f"FAILED {cell[1]} {cell[0]} seed {cell[2]} (exit {rc}); see {log_path(exp, cell)}"
    result = json.loads((Path(run_config(exp, *cell).out_dir) / "results.json").read_text(encoding="utf-8"))
    return summary_line(result, exp.splits[0])


def run_processes(jobs: list[tuple[Any, list[str], Path]], slots: int,
                  finished: Callable[[Any, int], str], poll_s: float = 0.2) -> list[Any]:
    """Run ``(key, argv, log)`` jobs, at most ``slots`` at once, each pinned by :func:`worker_env`;
    prints ``finished(key, returncode)`` as each ends and returns the keys of the failed ones."""
    gpus, queue, running, failed = visible_gpus(), list(jobs), {}, []
    free = list(range(slots))
    while queue or running:
        while queue and free:
            (key, argv, log), slot = queue.pop(0), free.pop(0)
            log.parent.mkdir(parents=True, exist_ok=True)
            fh = log.open("w", encoding="utf-8")
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=worker_env(slot, slots, gpus))
            running[proc] = (key, slot, fh)
        time.sleep(poll_s)
        for proc in [p for p in running if p.poll() is not None]:
            key, slot, fh = running.pop(proc)
            fh.close()
            free.append(slot)
            print(finished(key, proc.returncode), flush=True)
            if proc.returncode != 0:
                failed.append(key)
    return failed


def run_local(exp: ExperimentConfig, cells: list[Cell], jobs: int, poll_s: float = 0.2) -> list[Cell]:
    """Run ``cells`` with at most ``jobs`` worker processes; returns the cells that failed."""
    spec = write_spec(exp)
    argv = lambda c: [sys.executable, "-m", "posenc.experiments.worker", str(spec), c[0], c[1], str(c[2])]  # noqa: E731
    work = [(cell, argv(cell), log_path(exp, cell)) for cell in cells]
    return run_processes(work, jobs, lambda cell, rc: _finished(exp, cell, rc), poll_s)


def run_submitit(exp: ExperimentConfig, cells: list[Cell], jobs: int, cluster: str | None = None,
                 parameters: dict[str, Any] | None = None) -> list[Cell]:
    """Hand ``cells`` to submitit (SLURM when available; ``cluster='local'``/``'debug'`` otherwise)."""
    try:
        import submitit
    except ImportError as exc:
        raise ConfigError("--backend submitit needs the submitit package (pip install submitit)") from exc
    from posenc.experiments.worker import run_cell

    spec = write_spec(exp)
    executor = submitit.AutoExecutor(folder=exp.root / "logs" / "submitit", cluster=cluster)
    executor.update_parameters(**(parameters or {"timeout_min": 60, "slurm_array_parallelism": jobs}))
    submitted = [(cell, executor.submit(run_cell, str(spec), *cell)) for cell in cells]
    failed = []
    for cell, job in submitted:
        try:
            job.result()
            print(_finished(exp, cell, 0), flush=True)
        except Exception as exc:  # noqa: BLE001 - one failed run must not hide the others
            print(f"FAILED {cell[1]} {cell[0]} seed {cell[2]}: {str(exc).splitlines()[-1] if str(exc) else exc!r}", flush=True)
            failed.append(cell)
    return failed


def run_cells(exp: ExperimentConfig, cells: list[Cell], jobs: int, backend: str = "local") -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    failed = run_local(exp, cells, jobs) if backend == "local" else run_submitit(exp, cells, jobs)
    if failed:
        names = ", ".join(f"{s}/{m}/seed{seed}" for s, m, seed in failed)
        raise ConfigError(f"{len(failed)} run(s) failed: {names} (logs under {exp.root / 'logs'})")
