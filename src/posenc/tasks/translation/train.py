"""The translation task's training pieces: prepared data → token batches, the model
architectures (Seq2SeqTransformer, RNN-NMT), the stopping split and validation BLEU.

``posenc train`` runs them as :func:`posenc.tasks.translation.train_run` (the translation task
through :func:`posenc.tasks.base.run_task`, which owns the run directory). Run directory layout
(``cfg.out_dir``): ``config.yaml`` (the resolved RunConfig, paths relative to the run
directory), ``fingerprint.json`` (what determines its data and model), ``spm.model``,
``checkpoints/ckpt_XXXXXXXX/`` (+ ``average/``), ``train.csv``, ``valid.csv``,
``tensorboard/``, ``summary.json``; ``data/`` unless ``data_dir`` points elsewhere. The same
command works under ``torchrun``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from torch import nn

from posenc.data import settings as data_settings
from posenc.data.batching import Batch, collate, token_batches
from posenc.data.spm import Tokenizer
from posenc.data.text import read_lines
from posenc.decoding.translate import translate_lines
from posenc.errors import ConfigError, DataError
from posenc.evaluation.metrics import corpus_scores
from posenc.models.rnn_nmt import RNNNMT
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.tasks.translation.config import RunConfig

log = logging.getLogger("posenc")


class EncodedSplit:
    """Token ids of one split, with length-bucketed batching (sources/targets without BOS/EOS).

    With ``max_len`` (training), pairs whose source or target (with BOS/EOS) is longer than
    ``max_len`` tokens are dropped and counted in ``dropped``, so no batch exceeds the budget.
    """

    def __init__(
        self, tok: Tokenizer, data_dir: Path, split: str, prepend_src_bos: bool, max_len: int | None = None
    ) -> None:
        src = [tok.encode(s) for s in read_lines(data_dir / f"{split}.src")]
        tgt = [tok.encode(t) for t in read_lines(data_dir / f"{split}.tgt")]
        extra = 1 if prepend_src_bos else 0
        keep = [i for i in range(len(src)) if max_len is None or max(len(src[i]) + extra, len(tgt[i]) + 1) <= max_len]
        self.src, self.tgt = [src[i] for i in keep], [tgt[i] for i in keep]
        self.dropped = len(src) - len(keep)
        self.tok, self.prepend_src_bos = tok, prepend_src_bos

    def batches(
        self, max_tokens: int, shuffle: bool, seed: int, epoch: int, rank: int = 0, world: int = 1
    ) -> list[Batch]:
        extra = 1 if self.prepend_src_bos else 0
        src_lens = [len(s) + extra for s in self.src]
        tgt_lens = [len(t) + 1 for t in self.tgt]  # BOS + tokens / tokens + EOS
        groups = token_batches(src_lens, tgt_lens, max_tokens, shuffle, seed, epoch, rank, world)
        t = self.tok
        return [
            collate([self.src[i] for i in g], [self.tgt[i] for i in g], t.pad_id, t.bos_id, t.eos_id, g,
                    self.prepend_src_bos)
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
    """A translation architecture: which config section it reads and how to build it.
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


def train_split(cfg: RunConfig, tok: Tokenizer, data_dir: Path, bos: bool) -> EncodedSplit:
    """The training pairs, without those longer than ``data.max_train_len`` or the token budget."""
    limit = min(cfg.data.max_train_len, cfg.train.max_tokens)
    split = EncodedSplit(tok, data_dir, "train", bos, max_len=limit)
    if split.dropped:
        log.info("dropped %d training pairs longer than %d subwords (data.max_train_len=%d, train.max_tokens=%d)",
                 split.dropped, limit, cfg.data.max_train_len, cfg.train.max_tokens)
    if not split.src:
        raise DataError(f"no training pairs of at most {limit} subwords in {data_dir}")
    return split


def stopping_split(
    cfg: RunConfig, tok: Tokenizer, data_dir: Path, bos: bool, train: EncodedSplit
) -> tuple[EncodedSplit, str]:
    """The validation pairs whose loss drives patience and best-N checkpoint selection, and a
    description for the summary. EXTRAPOLATE: only pairs inside the training length range (source
    and target <= ``data.max_len`` subwords, the filter training had; with ``data.length_split``
    also the source-length range of ``train``), since unseen lengths are the test, never the
    stopping signal. Other settings: every validation pair. Pairs longer than training
    allows (``data.max_train_len``, ``train.max_tokens``) are skipped with a count, as in training."""
    limit = min(cfg.data.max_train_len, cfg.train.max_tokens)
    split = EncodedSplit(tok, data_dir, "valid", bos, max_len=limit)
    if split.dropped:
        log.warning("skipped %d validation pairs longer than %d subwords (data.max_train_len=%d, train.max_tokens=%d)",
                    split.dropped, limit, cfg.data.max_train_len, cfg.train.max_tokens)
    total = len(split.src)
    if cfg.data.setting != "extrapolate":
        skipped = f" ({split.dropped} longer than {limit} subwords skipped)" if split.dropped else ""
        return split, f"all {total} validation pairs{skipped}"
    bounds = (min(map(len, train.src)), max(map(len, train.src))) if cfg.data.length_split else None
    keep = data_settings.in_range([len(s) for s in split.src], [len(t) for t in split.tgt], cfg.data.max_len, bounds)
    if not keep:
        raise DataError(
            f"no validation pair inside the training length range (data.max_len={cfg.data.max_len}) in {data_dir}")
    split.src, split.tgt = [split.src[i] for i in keep], [split.tgt[i] for i in keep]
    where = f"source {bounds[0]}-{bounds[1]} and " if bounds else ""
    return split, (f"validation pairs with {where}source and target <= {cfg.data.max_len} subwords "
                   f"({len(keep)} of {total})")


def validation_bleu(cfg: RunConfig, tok: Tokenizer, data_dir: Path, bos: bool) -> Callable[[nn.Module], float] | None:
    """``train.metric_every``'s metric of translation: greedy sacreBLEU of the validation split (None if off)."""
    if cfg.train.metric_every <= 0:
        return None
    sources, refs = read_lines(data_dir / "valid.src"), read_lines(data_dir / "valid.tgt")
    if not sources:
        raise ConfigError("train.metric_every > 0 needs a validation split, but it is empty")
    dc = cfg.decode

    def bleu(model: nn.Module) -> float:
        hyps = translate_lines(model, tok, sources, beam=1, batch_tokens=dc.batch_tokens, too_long="truncate",
                               max_source_len=cfg.data.max_source_len, max_len_a=dc.max_len_a,
                               max_len_b=dc.max_len_b, prepend_src_bos=bos)
        return float(corpus_scores(list(hyps), refs)["bleu"])

    return bleu
