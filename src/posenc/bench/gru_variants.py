"""``python -m posenc.bench.gru_variants``: the GRU encoder's training-step variants against APE.

Variants (same model, batch and timing method as ``python -m posenc.bench``: interleaved rounds,
paired median ratio to APE): ``gru`` (default: float32 GRU, decoder GRU prefetched on a side
stream), ``gru-noprefetch`` (the decoder GRU runs in turn, after the encoder), ``gru-autocast``
(``gru.autocast: true``: cuDNN fp16 under CUDA autocast), ``gru-graph`` (``gru.cuda_graph: true``:
the full pass CUDA-graphed, captured in the warmup rounds). Prints one markdown row per length.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch

from posenc.bench.core import BenchConfig, TrainStep, batch_size, interleaved, paired_ratio, synthetic_batch
from posenc.models.config import ModelConfig
from posenc.models.seq2seq import Seq2SeqTransformer

VARIANTS: dict[str, dict[str, Any]] = {
    "ape": {"name": "ape"},
    "gru": {"name": "rnn"},
    "gru-noprefetch": {"name": "rnn"},
    "gru-autocast": {"name": "rnn", "gru": {"autocast": True}},
    "gru-graph": {"name": "rnn", "gru": {"cuda_graph": True}},
}


def build(variant: str, cfg: BenchConfig) -> Seq2SeqTransformer:
    torch.manual_seed(cfg.seed)
    mcfg = ModelConfig.from_preset(cfg.preset, vocab_size=cfg.vocab, position=VARIANTS[variant])
    model = Seq2SeqTransformer(mcfg).to(cfg.device)
    if variant == "gru-noprefetch":
        model.decoder.input_pos.prefetch = lambda *_: None  # shadow the hint: no overlap
    return model


def compare(cfg: BenchConfig, length: int) -> dict[str, tuple[float, float]]:
    """variant → (median seconds per step, paired ratio to APE) at one length."""
    batch = synthetic_batch(batch_size(length, cfg.batch_tokens), length, cfg.vocab, cfg.device, cfg.seed)
    steps = {v: TrainStep(build(v, cfg), batch, cfg.device) for v in VARIANTS}
    times = interleaved(steps, cfg.reps, cfg.warmup)
    return {v: (statistics.median(times[v]), paired_ratio(times, v)) for v in VARIANTS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m posenc.bench.gru_variants", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--preset", default="transformer-base")
    p.add_argument("--lengths", default="32,128,512")
    p.add_argument("--batch-tokens", type=int, default=16384)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--vocab", type=int, default=8000)
    a = p.parse_args(argv)
    lengths = [int(t) for t in a.lengths.split(",") if t.strip()]
    cfg = BenchConfig(lengths=lengths, reps=a.reps, warmup=a.warmup, batch_tokens=a.batch_tokens, preset=a.preset,
                      vocab=a.vocab, device=a.device)
    print("| L | " + " | ".join(f"{v} ms (×APE)" for v in VARIANTS) + " |")
    print("|---|" + "---|" * len(VARIANTS))
    for length in lengths:
        res = compare(cfg, length)
        print(f"| {length} | " + " | ".join(f"{s * 1e3:.2f} ({r:.3f})" for s, r in res.values()) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
