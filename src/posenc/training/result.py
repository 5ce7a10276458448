"""What a training run returns and leaves behind: :class:`TrainResult` (built once, when training
ends) and the run's ``summary.json`` (stop reason and convergence status, defined in
:mod:`posenc.training.convergence`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.files import atomic_write_text
from posenc.training.convergence import convergence
from posenc.training.state import TrainState


@dataclass(frozen=True)
class TrainResult:
    """The end of one training session.

    Args:
        state: the loop's final state (step, tokens, validation history, ...).
        stopped: ``max_steps``, ``max_epochs`` or ``patience``.
        last_checkpoint: the checkpoint of the last step.
        average: ``checkpoints/average`` (best N with ``train.average_best``, else last N), or None.
        averaged_from: the names of the checkpoints in the average.
        train: the train.csv rows of this session.
        valid: the valid.csv rows of this session.
        warmup: the learning-rate warm-up updates (for "best in warm-up").
        max_steps: the step cap (a run that reaches it is never converged).
        run_record: the contents of the run's ``summary.json``.
    """

    state: TrainState
    stopped: str
    last_checkpoint: Path | None = None
    average: Path | None = None
    averaged_from: list[str] = field(default_factory=list)
    train: list[dict[str, Any]] = field(default_factory=list)
    valid: list[dict[str, Any]] = field(default_factory=list)
    warmup: int | None = None
    max_steps: int | None = None
    run_record: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """:func:`session_summary` of this result.

        Returns:
            The session's stop reason, step, convergence keys and averaged checkpoints.
        """
        return session_summary(self.state, self.stopped, self.warmup, self.max_steps, self.averaged_from)


def session_summary(state: TrainState, stopped: str, warmup: int | None, max_steps: int | None,
                    averaged_from: list[str]) -> dict[str, Any]:
    """What a training session says about how it ended, for the run's ``summary.json``.

    Args:
        state: the loop's final state.
        stopped: the stop reason (``max_steps``, ``max_epochs`` or ``patience``).
        warmup: the learning-rate warm-up updates, or None when unknown.
        max_steps: the step cap; 0 or None = none.
        averaged_from: the names of the checkpoints averaged at the end (empty: none).

    Returns:
        The convergence keys (:func:`posenc.training.convergence.convergence`: stop reason, best
        step and loss, end slope, status), ``step`` and ``averaged_from``.
    """
    conv = convergence(state.valid_history, stopped, warmup, state.step, max_steps)
    return {**conv, "step": state.step, "averaged_from": averaged_from}


def run_summary(state: TrainState, summary: dict[str, Any], last: Path | None, params: int,
                out: Path) -> dict[str, Any]:
    """The trainer's part of a run's ``summary.json``: steps, epochs, tokens, wall clock, the
    number of parameters, the session's ``summary`` (:func:`session_summary`) and the final
    checkpoint ``last`` (relative to the run directory ``out``).

    Args:
        state: the loop's final state.
        summary: the session's summary (:func:`session_summary`).
        last: the final checkpoint, or None.
        params: the model's number of parameters.
        out: the run directory (``last`` lies inside it).

    Returns:
        ``steps``, ``epochs``, ``tokens``, ``wall_s``, ``params``, the entries of ``summary`` and
        ``checkpoint`` (``""`` without one).
    """
    checkpoint = str(Path(last).resolve().relative_to(Path(out).resolve())) if last else ""
    return {"steps": state.step, "epochs": state.epoch, "tokens": state.tokens, "wall_s": round(state.wall_s, 2),
            "params": params, **summary, "checkpoint": checkpoint}


def write_summary(record: dict[str, Any], out_dir: Path) -> Path:
    """``out_dir/summary.json`` holding ``record`` (:func:`run_summary` plus the run's entries;
    rank 0 calls this). One summary per run, one writer.

    Args:
        record: the whole summary (JSON-safe).
        out_dir: the run directory.

    Returns:
        The path of the ``summary.json`` written (atomically).
    """
    path = out_dir / "summary.json"
    atomic_write_text(path, json.dumps(record, indent=2))
    return path
