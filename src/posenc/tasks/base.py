"""The task interface: what a task provides so the one Trainer and ``posenc experiment`` run it.

A task turns its typed run config into a model, training/validation batches and a loss; after
training it evaluates the model and contributes to the experiment report. The Trainer never
knows which task it trains (it only calls ``loss_fn(model, batch)``).

:func:`run_task` is the one way a task trains: seed, ``build_model``, the Trainer with
``loss_fn=task.loss`` over ``train_batches``/``valid_batches`` (AMP, checkpoints, exact resume,
DDP, logging, best-N averaging), then ``evaluate``. A task's run config has a ``train`` section
that is a :class:`~posenc.training.config.TrainConfig` (tasks subclass it to change defaults) and
may have ``model``/``data`` dataclass sections (stored with every checkpoint). Tasks hold their
loaded data between calls (so ``train_batches`` does not reload it every epoch). A task may also
define ``width(cfg) -> int`` for the Noam schedule when its model has no ``cfg.d_model``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

import torch
from torch import nn

from posenc.config import to_dict
from posenc.errors import ConfigError
from posenc.training.loss import LossOutput
from posenc.training.state import TrainResult
from posenc.training.trainer import Trainer


@runtime_checkable
class Task(Protocol):
    """One task (translation, vision, speech, lengthgen). ``cfg`` is the task's run config."""

    #: The ``task:`` key of experiment YAMLs.
    name: str

    def build_model(self, cfg: Any) -> nn.Module:
        """The model for ``cfg`` (initial weights follow ``cfg.train.seed``)."""
        ...

    def train_batches(self, cfg: Any, epoch: int, rank: int, world: int) -> Sequence[Any]:
        """Training batches of one epoch: a pure function of its arguments (exact resume)."""
        ...

    def valid_batches(self, cfg: Any) -> Sequence[Any] | None:
        """Validation batches (loss/perplexity during training), or None."""
        ...

    def loss(self, model: nn.Module, batch: Any) -> LossOutput:
        """Summed loss, summed NLL and token/item count of one batch."""
        ...

    def evaluate(self, cfg: Any, model: nn.Module, out_dir: Path) -> dict[str, Any]:
        """Task metrics of a trained model (BLEU, accuracy by resolution, WER by duration, ...)."""
        ...

    def report(self, exp: Any, results: list[dict[str, Any]], out_dir: Path) -> Path:
        """Write the experiment report (Markdown + plots) under ``out_dir``; return its path."""
        ...


def single_process_only(task: str, options: dict[str, Any]) -> None:
    """Reject grid options (``--jobs``, ``--rerun-stale``, ``--backend``) a task does not support."""
    changed = {k: v for k, v in options.items() if v not in (None, False, 1, "local")}
    if changed:
        raise ConfigError(f"experiment task {task!r} does not support {', '.join(sorted(changed))}")


@dataclass
class TaskRun:
    """One trained run of a task: the model (eval mode), the Trainer's result, the task metrics."""

    model: nn.Module
    result: TrainResult
    metrics: dict[str, Any]


def run_task(task: Task, cfg: Any, out_dir: str | Path, resume: bool = True) -> TaskRun:
    """Build, train (the one :class:`~posenc.training.trainer.Trainer`, with the task's loss and
    batches) and evaluate one run. ``cfg.train`` is a :class:`~posenc.training.config.TrainConfig`;
    ``cfg.train.seed`` seeds the initial weights. A finished run in ``out_dir`` is resumed at its
    last checkpoint (no further updates) and only evaluated."""
    out = Path(out_dir)
    torch.manual_seed(cfg.train.seed)
    model = task.build_model(cfg)
    width = getattr(task, "width", None)  # optional: d_model of the Noam schedule
    trainer = Trainer(model, cfg.train, out, loss_fn=task.loss, config=_sections(cfg), d_model=width(cfg) if width else None)
    batches = partial(task.train_batches, cfg)
    result = trainer.fit(batches, task.valid_batches(cfg), resume=resume)
    model.eval()
    return TaskRun(model, result, task.evaluate(cfg, model, out))


def _sections(cfg: Any) -> dict[str, Any]:
    """Config sections stored with every checkpoint (the ``model`` one must match on resume)."""
    return {name: to_dict(getattr(cfg, name)) for name in ("model", "data") if dataclasses.is_dataclass(getattr(cfg, name, None))}
