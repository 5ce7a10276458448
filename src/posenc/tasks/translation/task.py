"""The translation task: the pipeline's Seq2Seq model, token batches, label-smoothed loss and
BLEU/chrF scoring behind the :class:`~posenc.tasks.base.Task` interface.

It wraps :mod:`posenc.pipeline` (data preparation, model building, batching, decoding) instead of
re-implementing it; ``posenc train`` (pipeline/train.py) and :func:`posenc.tasks.base.run_task`
train the same model on the same batches through the same Trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from posenc.data.batching import Batch
from posenc.data.spm import Tokenizer
from posenc.pipeline.config import RunConfig
from posenc.pipeline.prepare import load_meta, prepare
from posenc.pipeline.train import ARCHS, EncodedSplit, build_model, resolve_model_config, source_bos
from posenc.training import checkpoint as ck
from posenc.training.loss import LossOutput, Seq2SeqLoss


@dataclass
class _Prepared:
    cfg: RunConfig  # with the data-dependent values (vocabulary size, CAPE α) filled in
    tokenizer: Tokenizer
    data_dir: Path


class TranslationTask:
    """:class:`~posenc.tasks.base.Task` for sentence-level translation scored by BLEU/chrF."""

    name = "translation"

    def __init__(self, splits: tuple[str, ...] = ("test",)) -> None:
        self.splits = splits
        self._prepared: dict[str, _Prepared] = {}
        self._encoded: dict[tuple[str, str, bool], EncodedSplit] = {}
        self._loss: Seq2SeqLoss | None = None
        self._bos: bool | None = None  # the built model's source-BOS flag (set by build_model)

    def prepared(self, cfg: RunConfig) -> _Prepared:
        """Prepare the data once (pipeline/prepare.py) and resolve the model config from it."""
        key = str(cfg.prepared_dir)
        if key not in self._prepared:
            data_dir = prepare(cfg.data, cfg.prepared_dir)
            tok = Tokenizer.from_file(data_dir / "spm.model")
            self._prepared[key] = _Prepared(resolve_model_config(cfg, load_meta(data_dir)), tok, data_dir)
        return self._prepared[key]

    def resolved(self, cfg: RunConfig) -> RunConfig:
        return self.prepared(cfg).cfg

    def build_model(self, cfg: RunConfig) -> nn.Module:
        p = self.prepared(cfg)
        torch.manual_seed(cfg.train.seed)  # as pipeline/train.py: initial weights follow train.seed
        model = build_model(p.cfg, p.tokenizer.pad_id)
        self._loss = Seq2SeqLoss(cfg.train.label_smoothing, p.tokenizer.pad_id)
        self._bos = source_bos(p.cfg)
        return model

    def width(self, cfg: RunConfig) -> int:
        """d_model of the Noam schedule (the RNN-NMT's hidden size)."""
        arch = ARCHS[cfg.arch]
        return arch.width(arch.section(self.resolved(cfg)))

    def _split(self, cfg: RunConfig, name: str) -> EncodedSplit:
        p = self.prepared(cfg)
        if self._bos is None:
            raise RuntimeError("TranslationTask: build_model first (batches depend on the model's source BOS)")
        key = (str(p.data_dir), name, self._bos)
        if key not in self._encoded:
            self._encoded[key] = EncodedSplit(p.tokenizer, p.data_dir, name, self._bos)
        return self._encoded[key]

    def train_batches(self, cfg: RunConfig, epoch: int, rank: int, world: int) -> list[Batch]:
        tc = cfg.train
        return self._split(cfg, "train").batches(tc.max_tokens, True, tc.seed, epoch, rank, world)

    def valid_batches(self, cfg: RunConfig) -> list[Batch] | None:
        return self._split(cfg, "valid").batches(cfg.train.max_tokens, False, 0, 0) or None

    def loss(self, model: nn.Module, batch: Batch) -> LossOutput:
        if self._loss is None:
            raise RuntimeError("TranslationTask.loss before build_model")
        return self._loss(model, batch)

    def evaluate(self, cfg: RunConfig, model: nn.Module, out_dir: Path) -> dict[str, Any]:
        """BLEU/chrF of ``model`` on ``self.splits`` (pipeline/run.py's decoding and scoring)."""
        from posenc.pipeline.run import LoadedRun, translate_split

        p = self.prepared(cfg)
        run_cfg = p.cfg if Path(p.cfg.out_dir) == Path(out_dir) else _with_out_dir(p.cfg, out_dir)
        latest = ck.latest_checkpoint(Path(out_dir) / "checkpoints") or Path(out_dir)
        loaded = LoadedRun(run_cfg, model.eval(), p.tokenizer, latest)
        return {split: translate_split(loaded, split) for split in self.splits}

    def report(self, exp: Any, results: list[dict[str, Any]], out_dir: Path) -> Path:
        from posenc.experiments.report import write_translation_report

        return write_translation_report(exp, results)


def _with_out_dir(cfg: RunConfig, out_dir: Path) -> RunConfig:
    from dataclasses import replace

    return replace(cfg, out_dir=str(out_dir))
