"""Eager vs torch.compile training step on the CPU, and the cost of dropout masks.

``python -m posenc.bench.cpu_compile [--dropout 0.1] [--rounds 7]``: the training step of the posenc
peer worker (transformer-small, 32 x 32 tokens, fused Adam, one thread), eager and compiled built
in one process, interleaved rounds, thread CPU time per step. ``--masks`` times dropout masks
on one (1,024 x 1,024) activation (forward + backward) instead. Results: docs/perf/cpu_step.md."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).parent / "peer_workers"))
from common import synthetic  # noqa: E402

from posenc.config import from_dict  # noqa: E402
from posenc.models.config import ModelConfig  # noqa: E402
from posenc.models.seq2seq import Seq2SeqTransformer  # noqa: E402
from posenc.training import TrainConfig  # noqa: E402
from posenc.training.optimization import build_optimizer  # noqa: E402

SIZE = {"vocab": 8000, "length": 32, "batch": 32, "seed": 0}


def train_step(compiled: bool, dropout: float) -> Callable[[], None]:
    """One forward/backward/Adam step of transformer-small on a fixed synthetic batch."""
    torch.manual_seed(0)
    mcfg = from_dict(ModelConfig, dict(encoder_layers=3, decoder_layers=3, d_model=256, heads=4, d_ff=1024,
                                       dropout=dropout, vocab_size=SIZE["vocab"], position={"name": "ape"}))
    model = Seq2SeqTransformer(mcfg, pad_id=0).train()
    opt = build_optimizer(list(model.parameters()), TrainConfig(lr=1e-4, betas=[0.9, 0.98], eps=1e-9),
                          torch.device("cpu"))
    src, tgt = synthetic(SIZE, SIZE["batch"], SIZE["length"], 0)
    mask = torch.ones_like(src, dtype=torch.bool)

    def loss(src: torch.Tensor, tin: torch.Tensor, tout: torch.Tensor) -> torch.Tensor:
        logits = model(src, mask, tin, mask)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tout.flatten())

    fn = torch.compile(loss) if compiled else loss

    def step() -> None:
        fn(src, tgt[:, :-1], tgt[:, 1:]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def masks(p: float) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Dropout variants with the same keep probability (the 16-bit one up to 2^-16)."""
    def sliced(x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1).view(torch.int16)[:n]
        return x * (bits.view(x.shape) >= -32768 + round(p * 65536)) * (1 / (1 - p))
    return {"F.dropout": lambda x: torch.nn.functional.dropout(x, p, True),
            "rand_like compare": lambda x: x * (torch.rand_like(x) >= p) * (1 / (1 - p)),
            "native_dropout": lambda x: torch.native_dropout(x, p, True)[0],
            "int64 random_, 16-bit slices": sliced}


def thread_ms(fn: Callable[[], object], repeat: int) -> float:
    start = time.thread_time()
    for _ in range(repeat):
        fn()
    return (time.thread_time() - start) / repeat * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--masks", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.masks:
        x = torch.randn(1024, 1024, requires_grad=True)
        for name, fn in masks(args.dropout).items():
            thread_ms(lambda: fn(x).sum().backward(), 3)
            print(f"{name:<30} {thread_ms(lambda: fn(x).sum().backward(), 20):6.2f} ms")
        return
    steps = {kind: train_step(kind == "compiled", args.dropout) for kind in ("eager", "compiled")}
    for step in steps.values():
        thread_ms(step, 3)  # warm-up (and the compile)
    times: dict[str, list[float]] = {kind: [] for kind in steps}
    for _ in range(args.rounds):
        for kind, step in steps.items():
            times[kind].append(thread_ms(step, 3))
    e, c = (statistics.median(times[k]) for k in ("eager", "compiled"))
    ratios = [round(a / b, 3) for a, b in zip(times["eager"], times["compiled"])]
    print(f"dropout {args.dropout}: eager {e:.1f} ms, compiled {c:.1f} ms per step; "
          f"eager/compiled {e / c:.3f} {ratios}")


if __name__ == "__main__":
    main()
