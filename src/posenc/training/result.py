"""What a training run returns and leaves behind: :class:`TrainResult` (the final
:class:`~posenc.training.state.TrainState`, stop reason, checkpoints, log rows) and the run's
``summary.json`` (stop reason and convergence status, defined in
:mod:`posenc.training.convergence`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from posenc.files import atomic_write_text
from posenc.training.convergence import convergence
from posenc.training.state import TrainState


@dataclass
class TrainResult:
    state: TrainState
    stopped: str  # "max_steps" | "max_epochs" | "patience"
    last_checkpoint: Path | None = None
    average: Path | None = None  # checkpoints/average (best N when train.average_best, else last N)
    train: list[dict[str, Any]] = field(default_factory=list)  # train.csv rows of this session
    valid: list[dict[str, Any]] = field(default_factory=list)  # valid.csv rows of this session
    averaged_from: list[str] = field(default_factory=list)  # checkpoint names in the average
    warmup: int | None = None  # learning-rate warm-up updates (for "best in warm-up")
    max_steps: int | None = None  # the step cap (a run that reaches it is never converged)
    run_record: dict[str, Any] = field(default_factory=dict)  # summary.json's contents (set by Trainer.fit)

    def summary(self) -> dict[str, Any]:
        """Stop reason, step, best step/loss, end slope and convergence status
        (:func:`posenc.training.convergence.convergence`) and the averaged checkpoints."""
        conv = convergence(self.state.valid_history, self.stopped, self.warmup, self.state.step, self.max_steps)
        return {**conv, "step": self.state.step, "averaged_from": self.averaged_from}

    def run_summary(self, model: nn.Module, out: Path) -> dict[str, Any]:
        """The run's ``summary.json``: steps, epochs, tokens, wall clock, parameters,
        :meth:`summary` and the final checkpoint (relative to the run directory ``out``)."""
        s, last = self.state, self.average or self.last_checkpoint
        checkpoint = str(Path(last).resolve().relative_to(Path(out).resolve())) if last else ""
        return {"steps": s.step, "epochs": s.epoch, "tokens": s.tokens, "wall_s": round(s.wall_s, 2),
                "params": sum(p.numel() for p in model.parameters()), **self.summary(), "checkpoint": checkpoint}


def write_summary(record: dict[str, Any], out_dir: Path) -> Path:
    """``out_dir/summary.json`` holding ``record`` (:meth:`TrainResult.run_summary` plus the
    caller's entries; rank 0 calls this). One summary per run, one writer. Runs written before
    this also kept the trainer's part as ``train_summary.json`` (still read:
    tasks/translation/convergence.py)."""
    path = out_dir / "summary.json"
    atomic_write_text(path, json.dumps(record, indent=2))
    return path
