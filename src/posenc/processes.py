"""A pool of worker processes, pinned to GPUs round robin: N processes at a time, several
small runs packed onto each visible GPU, the CPU cores split between them. Used by the
experiment grids (``posenc experiment NAME --jobs N``) of every task."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable


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
    src = str(Path(__file__).resolve().parents[1])  # src/: the posenc package this process runs
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


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
