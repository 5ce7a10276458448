"""Peak memory of one training step per (method, length).

CPU: torch has no allocator statistics on CPU and tracemalloc does not see its buffers, so each
configuration runs in a fresh subprocess (``python -m posenc.bench.memory``) that reports the growth
of its resident-set high-water mark (``ru_maxrss``) over one forward+backward of the freshly built
model. CUDA: ``torch.cuda.max_memory_allocated`` during a forward+backward minus the memory allocated
before it (after one warm-up step).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from dataclasses import asdict
from typing import Any

import torch

from posenc.bench.core import BenchConfig, TrainStep, batch_size, build_model, synthetic_batch
from posenc.errors import PosencError

MB = 1024.0 * 1024.0


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def step_peak_mb(method: str, length: int, cfg: BenchConfig) -> float:
    """Growth of memory (MB) over one forward+backward from the state before it: activations kept
    for backward, the backward's temporaries and the gradients (≈ 4 bytes × parameters, the same
    for every method up to its own tables)."""
    model = build_model(method, cfg)
    step = TrainStep(model, synthetic_batch(batch_size(length, cfg.batch_tokens), length, cfg.vocab, cfg.device), cfg.device)
    if cfg.device.startswith("cuda"):
        step()  # CUDA context, cuBLAS workspaces and Adam state exist before the measured pass
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step.forward_backward()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / MB
    base = _maxrss_mb()  # fresh process: the high-water mark is the built model and batch
    step.forward_backward()
    return max(0.0, _maxrss_mb() - base)


def measure_in_subprocess(method: str, length: int, cfg: BenchConfig, timeout: float = 900.0) -> float | None:
    """Run :func:`step_peak_mb` in a fresh interpreter (CPU); None when it fails."""
    cmd = [sys.executable, "-m", "posenc.bench.memory", "--method", method, "--length", str(length), "--config", json.dumps(asdict(cfg))]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        return None
    if res.returncode != 0:
        return None
    return float(json.loads(res.stdout.strip().splitlines()[-1])["peak_mem_mb"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Peak memory of one training step (internal to posenc.bench)")
    parser.add_argument("--method", required=True)
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--config", required=True, help="BenchConfig as JSON")
    args = parser.parse_args(argv)
    try:
        cfg = BenchConfig(**json.loads(args.config))
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        print(json.dumps({"peak_mem_mb": step_peak_mb(args.method, args.length, cfg)}))
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
