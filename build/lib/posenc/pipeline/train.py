"""``posenc train``: prepared data → token batches → Seq2SeqTransformer → Trainer.

Run directory layout (``cfg.out_dir``): ``config.yaml`` (the resolved RunConfig),
``spm.model``, ``checkpoints/ckpt_XXXXXXXX/`` (+ ``average/``), ``train.csv``, ``valid.csv``,
``tb/`` (TensorBoard), ``summary.json``. The same command works under ``torchrun``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from posenc.config import save_yaml, to_dict
from posenc.data.batching import Batch, collate, token_batches
from posenc.data.spm import Tokenizer
from posenc.data.text import read_lines
from posenc.models.rnn_nmt import RNNNMT
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.pipeline.config import RunConfig
from posenc.pipeline.prepare import load_meta, prepare
from posenc.training.distributed import env_int
from posenc.training.trainer import train


class EncodedSplit:
    """Token ids of one split, with length-bucketed batching (sources/targets without BOS/EOS)."""

    def __init__(self, tok: Tokenizer, data_dir: Path, split: str, prepend_bos: bool) -> None:
        self.src = [tok.encode(s) for s in read_lines(data_dir / f"{split}.src")]
        self.tgt = [tok.encode(t) for t in read_lines(data_dir / f"{split}.tgt")]
        self.tok, self.prepend_bos = tok, prepend_bos

    def batches(self, max_tokens: int, shuffle: bool, seed: int, epoch: int, rank: int = 0, world: int = 1) -> list[Batch]:
        extra = 1 if self.prepend_bos else 0
        src_lens = [len(s) + extra for s in self.src]
        tgt_lens = [len(t) + 1 for t in self.tgt]  # BOS + tokens / tokens + EOS
        groups = token_batches(src_lens, tgt_lens, max_tokens, shuffle, seed, epoch, rank, world)
        t = self.tok
        return [
            collate([self.src[i] for i in g], [self.tgt[i] for i in g], t.pad_id, t.bos_id, t.eos_id, g, self.prepend_bos)
            for g in groups
        ]


def resolve_model_config(cfg: RunConfig, meta: dict[str, Any]) -> RunConfig:
    """Fill what comes from the data: vocabulary size and CAPE's α (when ``source_scale`` is 0)."""
    pos = cfg.model.position
    if pos.cape.source_scale == 0.0:
        pos = replace(pos, cape=replace(pos.cape, source_scale=float(meta["alpha"])))
    vocab = int(meta["vocab_size"])
    model = replace(cfg.model, vocab_size=vocab, position=pos)
    return replace(cfg, model=model, rnn=replace(cfg.rnn, vocab_size=vocab))


@dataclass(frozen=True)
class Arch:
    """An architecture of the pipeline: which config section it reads and how to build it.
    Every model follows Seq2SeqTransformer's decoding protocol (forward/encode/init_state/step)."""

    section: Callable[[RunConfig], Any]  # its config dataclass within the run config
    width: Callable[[Any], int]  # d_model for the Noam schedule
    build: Callable[[Any, int], nn.Module]  # (section, pad id) → model


ARCHS: dict[str, Arch] = {
    "transformer": Arch(lambda c: c.model, lambda m: m.d_model, lambda m, pad: Seq2SeqTransformer(m, pad_id=pad)),
    "rnn-nmt": Arch(lambda c: c.rnn, lambda r: r.hidden, lambda r, pad: RNNNMT(r, pad_id=pad)),
}


def build_model(cfg: RunConfig, pad_id: int) -> nn.Module:
    arch = ARCHS[cfg.arch]
    return arch.build(arch.section(cfg), pad_id)


def source_bos(model: nn.Module) -> bool:
    augment = getattr(model, "augment", None)
    return bool(augment is not None and augment.prepend_source_bos)


def train_run(cfg: RunConfig, resume: bool = True) -> dict[str, Any]:
    """Prepare data if needed, train, and return a summary (also written to summary.json)."""
    data_dir = prepare(cfg.data, cfg.prepared_dir)
    cfg = resolve_model_config(cfg, load_meta(data_dir))
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(data_dir / "spm.model")
    is_main = env_int("RANK", 0) == 0
    if is_main:
        save_yaml(cfg, out / "config.yaml")
        shutil.copyfile(data_dir / "spm.model", out / "spm.model")
    torch.manual_seed(cfg.train.seed)  # initial weights follow train.seed
    model = build_model(cfg, tok.pad_id)
    bos = source_bos(model)
    train_split = EncodedSplit(tok, data_dir, "train", bos)
    valid = EncodedSplit(tok, data_dir, "valid", bos).batches(cfg.train.max_tokens, False, 0, 0)
    tc = cfg.train
    batches_fn = lambda epoch, rank, world: train_split.batches(tc.max_tokens, True, tc.seed, epoch, rank, world)  # noqa: E731
    arch = ARCHS[cfg.arch]
    sections = {"data": to_dict(cfg.data), "model": to_dict(arch.section(cfg))}
    result = train(model, batches_fn, tc, out, valid_batches=valid or None, resume=resume, config=sections,
                   d_model=arch.width(arch.section(cfg)))
    n_params = sum(p.numel() for p in model.parameters())
    summary = {
        "steps": result.state.step, "epochs": result.state.epoch, "tokens": result.state.tokens,
        "wall_s": round(result.state.wall_s, 2), "params": n_params, "stopped": result.stopped,
        "best_valid": result.state.best_valid,
        "checkpoint": str(result.average or result.last_checkpoint),
    }
    if is_main:
        (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary
