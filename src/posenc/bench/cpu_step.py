#!/usr/bin/env python3
"""One-process CPU comparison of the peer workers' training step and beam-4 decode.

``python -m posenc.bench.peers`` runs each toolkit in its own subprocess and times wall clock; on a shared,
loaded machine that mixes other jobs' load into the ratios. This script imports the workers of
``posenc/bench/peer_workers/`` into *one* interpreter (the Hugging Face venv has torch, so it can
import posenc from ``src/`` too), runs their ``train``/``beam`` commands in interleaved rounds
(order rotated each round) and times each call with ``time.thread_time`` (this thread's CPU time,
so other processes' load mostly drops out). ``--profile`` prints torch.profiler tables (CPU time
by operator, self and total) for one step of each.

Usage (the HF venv, one thread)::

    OMP_NUM_THREADS=1 PYTHONPATH=src ~/.cache/posenc-peers/hf/bin/python \
        -m posenc.bench.cpu_step --workers posenc,marian --rounds 7 [--profile train]

Ratios are speed / the first worker's speed (>1: faster than it), median over rounds of the paired
per-round ratio, as in ``peers.py``.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "peer_workers"), str(HERE.parents[1])]  # the workers; the directory holding posenc

import torch  # noqa: E402

WORKERS = {"posenc": ("posenc_worker", "ape"), "posenc-rpe": ("posenc_worker", "rpe"),
           "marian": ("marian_worker", "ape"), "onmt": ("onmt_worker", "ape")}


def build(name: str, base: dict[str, Any]) -> dict[str, Callable[[], int]]:
    module, position = WORKERS[name]
    torch.manual_seed(0)
    return importlib.import_module(module).setup({**base, "position": position})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="posenc,marian")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=3, help="calls per worker per round")
    p.add_argument("--kinds", default="train,beam")
    p.add_argument("--profile", choices=["train", "beam"], help="print torch.profiler tables instead of timing")
    p.add_argument("--rows", type=int, default=25)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    base = {"vocab": 8000, "layers": 3, "d_model": 256, "heads": 4, "d_ff": 1024, "dropout": 0.1, "rpe_k": 16,
            "beam": 4, "batch": 32, "length": 32, "decode_batch": 16, "decode_len": 24, "threads": 1}
    names = [n for n in args.workers.split(",") if n]
    runners = {n: build(n, base) for n in names}
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        for n in names:
            for _ in range(args.warmup):
                runners[n][args.profile]()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(args.steps):
                    runners[n][args.profile]()
            print(f"=== {n} {args.profile} x{args.steps} (self CPU) ===")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
            print(f"=== {n} {args.profile} x{args.steps} (total CPU) ===")
            print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=args.rows))
        return 0
    for kind in args.kinds.split(","):
        for n in names:
            for _ in range(args.warmup):
                runners[n][kind]()
        sec: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.rounds):
            for n in names[r % len(names):] + names[: r % len(names)]:
                t0 = time.thread_time()
                for _ in range(args.steps):
                    runners[n][kind]()
                sec[n].append((time.thread_time() - t0) / args.steps)
        ref = names[0]
        for n in names:
            ratio = statistics.median(a / b for a, b in zip(sec[ref], sec[n]))
            print(f"{kind:5s} {n:11s} median {statistics.median(sec[n]) * 1e3:8.1f} ms/call (thread CPU)  "
                  f"speed / {ref}: {ratio:.3f}  (per-round min {min(a / b for a, b in zip(sec[ref], sec[n])):.3f} "
                  f"max {max(a / b for a, b in zip(sec[ref], sec[n])):.3f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
