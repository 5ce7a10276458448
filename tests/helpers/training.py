"""Tiny models, data and configs shared by the training tests (CPU, a few ms per step)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from posenc.data.batching import Batch, collate, token_batches
from posenc.models.config import ModelConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.models.seq2seq_loss import Seq2SeqLoss
from posenc.training import TrainConfig, Trainer, TrainResult
from posenc.training.checkpoint import Checkpoint, latest_checkpoint, list_checkpoints, load_checkpoint
from posenc.training.loss import LossOutput

PAD, BOS, EOS, VOCAB = 0, 2, 3, 24


def tiny_model(dropout: float = 0.0, position: str = "ape", seed: int = 0) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    cfg = ModelConfig.from_preset(
        "transformer-tiny", vocab_size=VOCAB, dropout=dropout, encoder_layers=1, decoder_layers=1,
        d_model=16, heads=2, d_ff=32, position={"name": position},
    )
    return Seq2SeqTransformer(cfg, pad_id=PAD)


def random_pairs(n: int, seed: int = 0, lo: int = 2, hi: int = 7) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    def seq() -> list[int]:
        return [rng.randrange(4, VOCAB) for _ in range(rng.randint(lo, hi))]
    return [(seq(), seq()) for _ in range(n)]


def batch_of(pairs: list[tuple[list[int], list[int]]], indices: list[int] | None = None) -> Batch:
    idx = indices if indices is not None else list(range(len(pairs)))
    return collate([p[0] for p in pairs], [p[1] for p in pairs], PAD, BOS, EOS, idx)


def batches_fn(pairs: list[tuple[list[int], list[int]]], max_tokens: int, seed: int = 1) -> Callable[[int, int, int], list[Batch]]:
    """Shuffled token-bounded batches, a pure function of (epoch, rank, world_size)."""
    src_lens = [len(s) for s, _ in pairs]
    tgt_lens = [len(t) + 1 for _, t in pairs]

    def make(epoch: int, rank: int, world_size: int) -> list[Batch]:
        groups = token_batches(src_lens, tgt_lens, max_tokens, True, seed, epoch, rank, world_size)
        return [batch_of([pairs[i] for i in g], g) for g in groups]

    return make


def seq2seq_hooks(model: torch.nn.Module, cfg: TrainConfig, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` plus the Trainer's explicit hooks for the tiny translation model, unless given:
    its loss (label smoothing from ``cfg``) and width (d_model of the Noam schedule)."""
    kwargs.setdefault("loss_fn", Seq2SeqLoss(cfg.label_smoothing, model.pad_id))
    kwargs.setdefault("d_model", model.cfg.d_model)
    return kwargs


def latest(out: str | Path) -> Checkpoint | None:
    """The latest checkpoint under ``out/checkpoints``, loaded (what a run directory's opener resumes
    from), or None when there is none."""
    path = latest_checkpoint(Path(out) / "checkpoints")
    return None if path is None else load_checkpoint(path)


def train(model: torch.nn.Module, batches: Callable[[int, int, int], Any], cfg: TrainConfig, out: str | Path,
          **kwargs: Any) -> TrainResult:
    """``Trainer(...).fit(...)`` of the tiny translation model (see :func:`seq2seq_hooks`), resuming
    from ``resume`` (default: :func:`latest` of ``out``, as a run directory continues);
    ``valid_batches`` and ``metric_fn`` go to ``fit`` too, the other keywords to the Trainer."""
    fit = {k: kwargs.pop(k) for k in ("valid_batches", "metric_fn") if k in kwargs}
    resume = kwargs.pop("resume") if "resume" in kwargs else latest(out)
    return make_trainer(model, cfg, out, **kwargs).fit(batches, resume=resume, **fit)


def make_trainer(model: torch.nn.Module, cfg: TrainConfig, out: str | Path, cls: type[Trainer] = Trainer,
                 **kwargs: Any) -> Trainer:
    """A :class:`~posenc.training.Trainer` (or subclass ``cls``) of the tiny translation model."""
    return cls(model, cfg, out, **seq2seq_hooks(model, cfg, kwargs))


def train_config(**overrides: Any) -> TrainConfig:
    base = dict(seed=3, max_steps=4, update_freq=1, lr=1.0, warmup=4, device="cpu", log_every=1,
                validate_every=0, save_every=0, keep_last=0, label_smoothing=0.1)
    base.update(overrides)
    return TrainConfig(**base)


def prune_checkpoints(directory: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` checkpoints (0 = keep all); return the deleted."""
    ckpts = list_checkpoints(directory)
    if keep_last <= 0 or len(ckpts) <= keep_last:
        return []
    doomed = ckpts[: len(ckpts) - keep_last]
    for p in doomed:
        shutil.rmtree(p)
    return doomed


class HandValidLoss(Seq2SeqLoss):
    """Training batches: the real loss. Validation (eval mode): the next hand-made loss per token
    (the last one repeats once the list is used up)."""

    def __init__(self, losses: list[float]) -> None:
        super().__init__(0.1, 0)
        self.losses, self.calls = losses, 0

    def __call__(self, model: torch.nn.Module, batch: Batch) -> LossOutput:
        if model.training:
            return super().__call__(model, batch)
        value = torch.tensor(self.losses[min(self.calls, len(self.losses) - 1)] * 10.0, dtype=torch.float64)
        self.calls += 1
        return LossOutput(value, value, torch.tensor(10))
