"""Training-loop speed: optimizer steps/s of the real :class:`~posenc.training.Trainer`.

Shape legend: B sentences per batch, S source length, T target length.

Unlike the per-method step of :mod:`posenc.bench.core` (one fixed batch, bare Adam), this runs
the whole loop a run uses: token-bounded batches of varying shape (``train.max_tokens`` padded
tokens, :func:`~posenc.data.batching.token_batches`), the move to the device, label-smoothed loss,
token normalisation, Noam schedule, Adam and the logging. Sentence pairs are random tokens with
Multi30k-like lengths (uniform in [6, 30] subwords per side). The same batches are trained twice
in one process: eager fp32 (``eager-fp32``) and the configured precision/compile; each record
gives steps/s over the steps after ``warm`` untimed ones (compilation happens there),
source+target tokens/s and, on CUDA, MFU from :func:`posenc.bench.flops.train_flops` of the timed batches.
"""

from __future__ import annotations

import tempfile
from typing import Any, Callable

import numpy as np
import torch

from posenc.bench import flops
from posenc.bench.core import BenchConfig
from posenc.data.batching import Batch, collate, token_batches
from posenc.models.config import ModelConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.models.seq2seq_loss import Seq2SeqLoss
from posenc.training import TrainConfig, Trainer

PAD, BOS, EOS = 0, 2, 3
LENGTHS = (6, 30)  # subword tokens per sentence, uniform (Multi30k En-De averages ~13-16)


def loop_batches(n_batches: int, max_tokens: int, vocab: int, seed: int = 0) -> list[Batch]:
    """At least ``n_batches`` shuffled token-bounded batches of random sentence pairs (CPU)."""
    rng = np.random.default_rng(seed)
    per_batch = max(1, max_tokens // (LENGTHS[1] + 1))
    n = per_batch * (n_batches + 1)
    src = [rng.integers(4, vocab, rng.integers(LENGTHS[0], LENGTHS[1] + 1)).tolist() for _ in range(n)]
    tgt = [rng.integers(4, vocab, rng.integers(LENGTHS[0], LENGTHS[1] + 1)).tolist() for _ in range(n)]
    groups = token_batches([len(s) for s in src], [len(t) + 1 for t in tgt], max_tokens, True, seed, 0)
    return [collate([src[i] for i in g], [tgt[i] for i in g], PAD, BOS, EOS, g) for g in groups]


def _timed_fit(model: Seq2SeqTransformer, batches: list[Batch], cfg: BenchConfig, label: str, warm: int,
               steps: int) -> dict[str, Any]:
    """Train ``warm + steps`` updates (log rows every ``warm`` steps, the only host syncs) and time
    the steps after the first row from the rows' training wall clock."""
    how, precision = label.split("-")
    compile_ = {"captured": "reduce-overhead", "compiled": "on"}.get(how, "off")
    rounds = -(-steps // warm)
    tcfg = TrainConfig(max_steps=warm * (1 + rounds), max_tokens=cfg.loop_tokens, warmup=4000, lr=1.0, log_every=warm,
                       validate_every=0, save_every=0, keep_last=1,
                       device="cuda" if cfg.device.startswith("cuda") else "cpu", precision=precision,
                       compile=compile_, seed=cfg.seed)
    with tempfile.TemporaryDirectory(prefix="posenc-bench-") as out:
        trainer = Trainer(model, tcfg, out, Seq2SeqLoss(tcfg.label_smoothing, model.pad_id), d_model=model.cfg.d_model)
        result = trainer.fit(lambda epoch, rank, world: batches)
    first, last = result.train[0], result.train[-1]
    seconds, timed = last["wall_s"] - first["wall_s"], last["step"] - first["step"]
    used = [batches[i % len(batches)] for i in range(first["step"], last["step"])]
    tokens = sum(int(b.src_mask.sum() + b.tgt_mask.sum()) for b in used)
    rec: dict[str, Any] = {
        "kind": "train_loop", "method": "ape", "config": label, "preset": cfg.loop_preset, "length": None,
        "batch": round(sum(len(b) for b in used) / len(used), 1), "max_tokens": cfg.loop_tokens,
        "steps_per_s": timed / seconds, "tokens_per_s": tokens / seconds, "seconds_per_step": seconds / timed,
        "ratio_to_ape": 1.0, "peak_mem_mb": None, "reps": timed,
    }
    if cfg.device.startswith("cuda"):
        work = sum(flops.train_flops(model, len(b), b.src.shape[1], b.tgt_in.shape[1]) for b in used)
        rec["mfu"] = flops.mfu(work, seconds, flops.peak_bf16_flops(torch.cuda.get_device_name()))
    return rec


def loop_records(cfg: BenchConfig, log: Callable[[str], None] = lambda _: None, warm: int = 10) -> list[dict[str, Any]]:
    """``eager-fp32`` and the configured loop (once if they coincide); ``speedup`` = steps/s over
    the eager-fp32 figure of the same run. A captured step (``captured-*``) is timed after one
    untimed pass over the batches, so every padded shape's graph is recorded before the clock runs."""
    batches = loop_batches(min(cfg.loop_steps + warm, 64), cfg.loop_tokens, cfg.vocab, cfg.seed)
    labels = ["eager-fp32", cfg.loop_label()]
    records = []
    for label in dict.fromkeys(labels):
        torch.manual_seed(cfg.seed)
        mcfg = ModelConfig.from_preset(cfg.loop_preset, vocab_size=cfg.vocab, position={"name": "ape"},
                                       **cfg.loop_model)
        untimed = max(warm, len(batches)) if label.startswith("captured") else warm
        rec = _timed_fit(Seq2SeqTransformer(mcfg, pad_id=PAD), batches, cfg, label, untimed, cfg.loop_steps)
        rec["speedup"] = rec["steps_per_s"] / (records[0]["steps_per_s"] if records else rec["steps_per_s"])
        records.append(rec)
        mfu = f"  MFU {rec['mfu']:.1%}" if rec.get("mfu") is not None else ""
        log(f"train_loop {label:14s} B~{rec['batch']:6.1f} {rec['steps_per_s']:8.2f} steps/s "
            f"{rec['tokens_per_s']:10.0f} tok/s  ×eager-fp32 {rec['speedup']:.2f}{mfu}")
    return records


def loop_table(records: list[dict[str, Any]]) -> str:
    """Markdown rows of the ``train_loop`` records."""
    lines = ["| config | preset | max tokens | mean batch | steps/s | tokens/s | × eager-fp32 | MFU |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        if r.get("kind") == "train_loop":
            mfu = "—" if r.get("mfu") is None else f"{r['mfu']:.1%}"
            lines.append(f"| {r['config']} | {r['preset']} | {r['max_tokens']} | {r['batch']} | "
                         f"{r['steps_per_s']:.2f} | {r['tokens_per_s']:.0f} | {r['speedup']:.2f} | {mfu} |")
    return "\n".join(lines)
