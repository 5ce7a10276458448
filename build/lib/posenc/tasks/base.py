"""The task interface: what a task provides so the one Trainer and ``posenc experiment`` run it.

A task turns its typed run config into a model, training/validation batches and a loss; after
training it evaluates the model and contributes to the experiment report. The Trainer never
knows which task it trains (it only calls ``loss_fn(model, batch)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

from torch import nn

from posenc.training.loss import LossOutput


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
