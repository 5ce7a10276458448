#!/usr/bin/env python3
"""Shaw attention paths, one self-attention layer forward+backward, interleaved and paired.

Paths: ``reference`` (general (B, 1, L, L) index, textbook order, scatter value term:
``bench/reference.py``), ``scatter``
(Toeplitz context + in-place explicit path + scatter value term; the ``explicit`` CPU backend),
``banded`` (``ToeplitzShaw``: dense ops, strided band view, the CPU default), ``flex``
(FlexAttention left/right regions + O(L·k) band merge, ``positions/shaw_flex.py``; the CUDA default;
CUDA only) and ``sdpa`` (APE's fused attention,
for scale). Prints the median milliseconds, the paired speed ratio to ``reference`` and ``sdpa``, and
on CUDA the peak memory of one forward+backward over that of ``sdpa``. On CUDA the layer runs under
bf16 autocast, as the bench trains.

``--model``: whole training steps instead (``posenc.bench``'s step: transformer-small, Adam) of APE
and of Shaw with each CPU backend (``--backends``, default explicit,banded), interleaved rounds in
one process, ratio to APE as the paired median. ``--clock thread`` times with the thread's CPU time
(one torch thread): on a shared machine it is far less noisy than wall time (``--clock wall``).

Usage: ``python -m posenc.bench.shaw_paths [--device cuda] [--lengths 128,512,1024] [--tokens 2048] [--reps 7]
       [--causal] [--clock thread]``
       ``python -m posenc.bench.shaw_paths --model --lengths 32,128 --tokens 512 --reps 9 [--clock thread]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from posenc.bench.core import autocast, interleaved, paired_ratio, sync
from posenc.bench.reference import use_textbook_shaw
from posenc.models.attention import MultiHeadAttention, may_attend_mask
from posenc.positions.base import default_positions
from posenc.positions.shaw import RelativeContext, ShawParams, ShawRelativePosition, relative_index

CPU_PATHS = ("reference", "scatter", "banded", "sdpa")
CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


def runner(path: str, length: int, tokens: int, d: int, heads: int, k: int, device: str = "cpu", causal: bool = False,
           clock: Callable[[], float] = time.perf_counter) -> Callable[[], float]:
    b = max(1, tokens // length)
    torch.manual_seed(0)
    rel = ShawRelativePosition(d, ShawParams(k=k), 1, heads).to(device)
    hook = rel.hook(0)
    hook.backend = path if path in ("flex", "banded") else "explicit"
    mha = MultiHeadAttention(d, heads, hook=None if path == "sdpa" else hook).to(device)
    if path == "reference":
        use_textbook_shaw(mha)
    mask = torch.ones(b, length, dtype=torch.bool, device=device)
    pos = default_positions(mask)
    allowed = may_attend_mask(mask, length, causal=causal)
    x = torch.randn(b, length, d, requires_grad=True, device=device)

    def run() -> float:
        sync(device)
        start = clock()
        with autocast(device):
            if path == "sdpa":
                out = mha(x, x, allowed)
            else:
                ctx = RelativeContext(relative_index(pos, pos, k)) if path == "reference" else rel.context(pos, pos)
                out = mha(x, x, allowed, ctx)
        out.float().sum().backward()
        sync(device)
        return clock() - start

    return run


def model_rounds(lengths: list[int], tokens: int, reps: int, backends: list[str], clock: Callable[[], float]) -> None:
    """Whole training steps of APE and Shaw per backend (``--model``), interleaved in one process."""
    from posenc.bench.core import BenchConfig, TrainStep, batch_size, build_model, make_step, synthetic_batch
    from posenc.positions.shaw import set_backend

    cfg = BenchConfig(methods=["shaw"])

    def timed(step: TrainStep) -> Callable[[], float]:
        def run() -> float:
            start = clock()
            step.forward_backward()
            step.opt.step()
            step.opt.zero_grad(set_to_none=True)
            return clock() - start
        return run

    print("| L | batch | method | ms (median) | × APE (paired median) |\n|---|---|---|---|---|")
    for length in lengths:
        batch = synthetic_batch(batch_size(length, tokens), length, cfg.vocab, "cpu", cfg.seed)
        runs = {"ape": timed(make_step(build_model("ape", cfg), batch, cfg))}
        for backend in backends:
            model = build_model("shaw", cfg)
            set_backend(model, backend)
            runs[f"shaw ({backend})"] = timed(make_step(model, batch, cfg))
        times = interleaved(runs, reps, 2)
        for name in runs:
            print(f"| {length} | {batch['src'].shape[0]} | {name} | {1e3 * statistics.median(times[name]):.1f} | "
                  f"{paired_ratio(times, name):.3f} |", flush=True)


def peak_mb(run: Callable[[], float], device: str) -> float | None:
    """Peak CUDA memory (MB) of one call above what was allocated before it; None on CPU."""
    if not device.startswith("cuda"):
        return None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="128,512,1024")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--causal", action="store_true", help="decoder self-attention mask")
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="wall time or the thread's CPU time (CPU, one thread)")
    p.add_argument("--model", action="store_true", help="whole training steps of APE and Shaw per CPU backend")
    p.add_argument("--backends", default="explicit,banded", help="Shaw CPU backends for --model")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        model_rounds([int(t) for t in args.lengths.split(",")], args.tokens, args.reps, args.backends.split(","),
                     CLOCKS[args.clock])
        return
    paths = (*CPU_PATHS, "flex") if args.device.startswith("cuda") else CPU_PATHS
    print("| L | path | ms (median) | speed / reference | speed / sdpa | peak MB / sdpa |\n|---|---|---|---|---|---|")
    for length in (int(t) for t in args.lengths.split(",")):
        runs = {n: runner(n, length, args.tokens, args.d, args.heads, 16, args.device, args.causal, CLOCKS[args.clock])
                for n in paths}
        times = interleaved(runs, args.reps, 1)
        peaks = {n: peak_mb(runs[n], args.device) for n in paths}
        for name in runs:
            mem = "—" if peaks[name] is None else f"{peaks[name]:.0f} / {peaks['sdpa']:.0f}"
            print(f"| {length} | {name} | {1e3 * statistics.median(times[name]):.1f} | "
                  f"{paired_ratio(times, name, 'reference'):.3f} "
                  f"| {paired_ratio(times, name, 'sdpa'):.3f} | {mem} |", flush=True)


if __name__ == "__main__":
    main()
