"""Peak memory of one training step per (method, length).

CPU: torch has no allocator statistics on CPU and tracemalloc does not see its buffers, so each
configuration runs in a fresh subprocess (``python -m posenc.bench.memory``) that resets its
resident-set high-water mark after building the model (Linux ``/proc/self/clear_refs``) and reports
how far ``VmHWM`` rises over one forward+backward. CUDA: ``torch.cuda.max_memory_allocated`` during a
forward+backward minus the memory allocated before it (after one warm-up step).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from dataclasses import asdict

import torch

from posenc.bench.core import BenchConfig, batch_size, build_model, fresh_compile_cache, make_step, synthetic_batch
from posenc.errors import PosencError

MB = 1024.0 * 1024.0


def _status_mb(field: str) -> float | None:
    """``VmHWM`` / ``VmRSS`` of this process from /proc (Linux), in MB; None elsewhere."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return float(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _reset_peak() -> float:
    """Reset the resident-set high-water mark to the current RSS (Linux ``clear_refs`` 5) and return
    that floor in MB. ``ru_maxrss`` cannot be used: Linux carries the parent's peak into a forked
    child, so a child of a large benchmark process would never rise above it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        floor = _status_mb("VmRSS")
        if floor is not None:
            return floor
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # fallback: KiB on Linux


def _peak_mb() -> float:
    hwm = _status_mb("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def step_peak_mb(method: str, length: int, cfg: BenchConfig) -> float:
    """Growth of memory (MB) over one forward+backward from the state before it: activations kept
    for backward, the backward's temporaries and the gradients (≈ 4 bytes × parameters, the same
    for every method up to its own tables)."""
    fresh_compile_cache(cfg)
    model = build_model(method, cfg)
    step = make_step(model, synthetic_batch(batch_size(length, cfg.batch_tokens), length, cfg.vocab, cfg.device), cfg)
    if cfg.device.startswith("cuda"):
        step()  # CUDA context, cuBLAS workspaces, Adam state (and compiled graphs) exist before the measured pass
        if cfg.compiled():
            step()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step.forward_backward()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / MB
    base = _reset_peak()  # the floor: interpreter, model and batch
    step.forward_backward()
    return max(0.0, _peak_mb() - base)


def measure_in_subprocess(method: str, length: int, cfg: BenchConfig, timeout: float = 900.0) -> float | None:
    """Run :func:`step_peak_mb` in a fresh interpreter (CPU); None when it fails."""
    cmd = [sys.executable, "-m", "posenc.bench.memory", "--method", method, "--length", str(length),
           "--config", json.dumps(asdict(cfg))]
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
