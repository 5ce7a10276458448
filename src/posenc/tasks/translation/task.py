"""The translation task: its Seq2Seq model, token batches, label-smoothed loss and
BLEU/chrF scoring behind the :class:`~posenc.tasks.base.Task` interface.

It puts together the package's pieces (data preparation in :mod:`~posenc.tasks.translation.prepare`,
model building and batching in :mod:`~posenc.tasks.translation.train`, decoding in
:mod:`~posenc.tasks.translation.load`) instead of re-implementing them. ``posenc train`` is
:func:`train_run`: :func:`posenc.tasks.base.run_task` of this task without test splits, so a run
trained alone and one of an experiment grid are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from torch import nn

from posenc.config import to_dict
from posenc.data.batching import Batch
from posenc.data.spm import Tokenizer
from posenc.decoding.loaded import LoadedRun, source_bos
from posenc.errors import ConfigError
from posenc.files import atomic_write_bytes
from posenc.models.seq2seq_loss import Seq2SeqLoss
from posenc.tasks.base import Task, run_task
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.prepare import load_meta, prepare
from posenc.tasks.translation.spec import TOKENIZER_KEY, VOCAB_FILE, VOCAB_KEY
from posenc.tasks.translation.train import (
    ARCHS,
    EncodedSplit,
    build_model,
    resolve_model_config,
    stopping_split,
    train_split,
    validation_bleu,
)
from posenc.training import checkpoint as ck
from posenc.training.loss import LossOutput

#: Tokens of the shortest pair worth training on: one target subword and EOS.
MIN_PAIR_TOKENS = 2


@dataclass
class _Prepared:
    cfg: RunConfig  # with the data-dependent values (vocabulary size, CAPE α) filled in
    tokenizer: Tokenizer
    data_dir: Path


@dataclass
class _Splits:
    train: EncodedSplit  # without pairs longer than data.max_train_len / train.max_tokens
    valid: EncodedSplit  # the pairs whose loss drives patience (train.stopping_split)
    signal: str  # which validation pairs those are, for the summary


class TranslationTask(Task):
    """:class:`~posenc.tasks.base.Task` for sentence-level translation scored by BLEU/chrF.
    ``posenc train`` is ``run_task(TranslationTask(splits=()), cfg)``."""

    name = "translation"

    def __init__(self, splits: tuple[str, ...] = ("test",)) -> None:
        self.splits = splits
        self._prepared: dict[str, _Prepared] = {}
        self._encoded: dict[tuple[str, bool], _Splits] = {}
        self._loss: Seq2SeqLoss | None = None
        self._bos: bool | None = None  # the built model's source-BOS flag (set by build_model)

    def check(self, cfg: RunConfig) -> None:
        """Budgets no training pair can meet, refused before the data are prepared (nothing is
        written): the shortest pair takes 2 tokens (one target subword and EOS)."""
        for key, value in (("train.max_tokens", cfg.train.max_tokens), ("data.max_train_len", cfg.data.max_train_len)):
            if value < MIN_PAIR_TOKENS:
                raise ConfigError(f"{key} must be >= {MIN_PAIR_TOKENS} (one target subword and EOS), got {value}")

    def setup(self, cfg: RunConfig, restart: bool) -> RunConfig:
        """Prepare the data (rebuilt when a restarted run owns its data directory) and resolve
        the model config from it (vocabulary size, CAPE's α)."""
        owned = not cfg.data_dir or Path(cfg.data_dir).resolve() == (Path(cfg.out_dir) / "data").resolve()
        return self._prepare(cfg, rebuild=restart and owned).cfg

    def prepared(self, cfg: RunConfig) -> _Prepared:
        """The data of ``cfg``, prepared once (:meth:`_prepare`)."""
        return self._prepared.get(str(cfg.prepared_dir)) or self._prepare(cfg)

    def _prepare(self, cfg: RunConfig, rebuild: bool = False) -> _Prepared:
        """Prepare the data (prepare.py; ``rebuild``: afresh), load its vocabulary and resolve the
        model config from it; kept for the task's later calls."""
        data_dir = prepare(cfg.data, cfg.prepared_dir, replace=rebuild)
        tok = Tokenizer.from_file(data_dir / VOCAB_FILE)
        self._prepared[str(cfg.prepared_dir)] = _Prepared(resolve_model_config(cfg, load_meta(data_dir)), tok, data_dir)
        return self._prepared[str(cfg.prepared_dir)]

    def resolved(self, cfg: RunConfig) -> RunConfig:
        return self.prepared(cfg).cfg

    def build_model(self, cfg: RunConfig) -> nn.Module:
        p = self.prepared(cfg)
        model = build_model(p.cfg, p.tokenizer.pad_id)
        self._loss = Seq2SeqLoss(cfg.train.label_smoothing, p.tokenizer.pad_id)
        self._bos = source_bos(p.cfg)
        return model

    def width(self, cfg: RunConfig) -> int:
        """d_model of the Noam schedule (the RNN-NMT's hidden size)."""
        arch = ARCHS[cfg.arch]
        return arch.width(arch.section(self.resolved(cfg)))

    def checkpoint_sections(self, cfg: RunConfig) -> dict[str, Any]:
        """``arch``, ``data`` and the active model section: what ``load_run`` rebuilds from."""
        c = self.resolved(cfg)
        return {"arch": c.arch, "data": to_dict(c.data), "model": to_dict(ARCHS[c.arch].section(c))}

    def checkpoint_state(self, cfg: RunConfig) -> dict[str, Any]:
        """The vocabulary's sha256, stored with every checkpoint: loading checks it against spm.model."""
        return {VOCAB_KEY: self.prepared(cfg).tokenizer.sha256}

    def write_files(self, cfg: RunConfig, out_dir: Path) -> None:
        """The run's vocabulary (``spm.model``), so a moved run directory translates on its own."""
        atomic_write_bytes(Path(out_dir) / VOCAB_FILE, (self.prepared(cfg).data_dir / VOCAB_FILE).read_bytes())

    def _splits(self, cfg: RunConfig) -> _Splits:
        p = self.prepared(cfg)
        if self._bos is None:
            raise RuntimeError("TranslationTask: build_model first (batches depend on the model's source BOS)")
        key = (str(p.data_dir), self._bos)
        if key not in self._encoded:
            train = train_split(p.cfg, p.tokenizer, p.data_dir, self._bos)
            valid, signal = stopping_split(p.cfg, p.tokenizer, p.data_dir, self._bos, train)
            self._encoded[key] = _Splits(train, valid, signal)
        return self._encoded[key]

    def train_batches(self, cfg: RunConfig, epoch: int, rank: int, world: int) -> list[Batch]:
        tc = cfg.train
        return self._splits(cfg).train.batches(tc.max_tokens, True, tc.seed, epoch, rank, world)

    def valid_batches(self, cfg: RunConfig) -> list[Batch] | None:
        return self._splits(cfg).valid.batches(cfg.train.max_tokens, False, 0, 0) or None

    def validation_metric(self, cfg: RunConfig) -> Callable[[nn.Module], float] | None:
        """Greedy validation BLEU every ``train.metric_every`` updates (None when off)."""
        p = self.prepared(cfg)
        return validation_bleu(p.cfg, p.tokenizer, p.data_dir, bool(self._bos))

    def summary(self, cfg: RunConfig) -> dict[str, Any]:
        """What the run's summary records of its data: the stopping signal, the training pairs
        dropped as too long, its vocabulary file's sha256 (:meth:`checkpoint_state`) and the
        tokenizer's content identity (``tokenizer``: per-subword figures compare only between runs
        of one tokenizer, which a run's config alone does not pin, as SentencePiece training may
        differ between machines)."""
        s = self._splits(cfg)
        return {"stopping_signal": s.signal, "dropped_train_pairs": s.train.dropped, **self.checkpoint_state(cfg),
                TOKENIZER_KEY: self.prepared(cfg).tokenizer.identity}

    def loss(self, model: nn.Module, batch: Batch) -> LossOutput:
        if self._loss is None:
            raise RuntimeError("TranslationTask.loss before build_model")
        return self._loss(model, batch)

    def evaluate(self, cfg: RunConfig, model: nn.Module, out_dir: Path, result: Any = None) -> dict[str, Any]:
        """BLEU/chrF of ``model`` on ``self.splits`` (load.py's decoding and scoring)."""
        if not self.splits:
            return {}
        from posenc.tasks.translation.load import translate_split

        p = self.prepared(cfg)
        run_cfg = p.cfg if Path(p.cfg.out_dir) == Path(out_dir) else replace(p.cfg, out_dir=str(out_dir))
        latest = ck.latest_checkpoint(Path(out_dir) / "checkpoints") or Path(out_dir)
        loaded = LoadedRun(run_cfg, model.eval(), p.tokenizer, latest)
        return {split: translate_split(loaded, split) for split in self.splits}


def train_run(cfg: RunConfig, resume: bool = True) -> dict[str, Any]:
    """``posenc train``: prepare data if needed, train, and return the summary (``summary.json``).

    Everything is validated before the run directory is written (held under an exclusive lock):
    a run of another data/model config in ``out_dir`` is an error unless ``resume`` is False,
    which replaces it."""
    return run_task(TranslationTask(splits=()), cfg, resume=resume).summary
