#!/usr/bin/env python3
"""Shaw attention paths, one self-attention layer forward+backward, interleaved and paired.

Paths: ``reference`` (general (B, 1, L, L) index, textbook order, scatter value term), ``scatter``
(Toeplitz context + in-place explicit path + scatter value term), ``band`` (Toeplitz + in-place +
band value term, the default), and ``sdpa`` (APE's fused attention, for scale). Prints the median
milliseconds and the paired speed ratio to ``reference``.

Usage: ``python benchmarks/shaw_paths.py [--lengths 128,512,1024] [--tokens 2048] [--reps 7]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from posenc.bench.core import interleaved, paired_ratio
from posenc.models.attention import MultiHeadAttention, attention_bias
from posenc.positions.base import default_positions
from posenc.positions.shaw import RelativeContext, ShawParams, ShawRelativePosition, relative_index


def runner(path: str, length: int, tokens: int, d: int, heads: int, k: int) -> callable:
    b = max(1, tokens // length)
    torch.manual_seed(0)
    mha = MultiHeadAttention(d, heads)
    rel = ShawRelativePosition(d, ShawParams(k=k), 1, heads)
    hook = rel.hook(0)
    mask = torch.ones(b, length, dtype=torch.bool)
    pos = default_positions(mask)
    allowed = attention_bias(mask, length, causal=False)
    x = torch.randn(b, length, d, requires_grad=True)

    def run() -> float:
        start = time.perf_counter()
        if path == "sdpa":
            out = mha(x, x, allowed)
        else:
            ctx = RelativeContext(relative_index(pos, pos, k)) if path == "reference" else rel.context(pos, pos)
            mha.explicit_path = "reference" if path == "reference" else "fast"
            hook.value_path = "band" if path == "band" else "scatter"
            out = mha(x, x, allowed, hook, ctx)
        out.sum().backward()
        return time.perf_counter() - start

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="128,512,1024")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print("| L | path | ms (median) | speed / reference |\n|---|---|---|---|")
    for length in (int(t) for t in args.lengths.split(",")):
        runs = {n: runner(n, length, args.tokens, 256, 4, 16) for n in ("reference", "scatter", "band", "sdpa")}
        times = interleaved(runs, args.reps, 1)
        for name in runs:
            print(f"| {length} | {name} | {1e3 * statistics.median(times[name]):.1f} | {paired_ratio(times, name, 'reference'):.3f} |", flush=True)


if __name__ == "__main__":
    main()
