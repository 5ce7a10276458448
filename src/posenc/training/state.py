"""The training loop's state and its checkpoints: what a checkpoint holds beside the weights,
saving it, exact resume (optimizer, schedule, scaler, every rank's RNG states), pruning, and the
average at the end (:mod:`posenc.training.averaging`).

Every checkpoint's ``state.json`` records the validation loss measured at its step
(``valid_loss``, None when no validation ran there) and the loop's :class:`TrainState`, whose
``valid_history`` lists every validation ``[step, loss]`` so far: best-N selection, pruning and
the patience counter therefore survive a resume.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from posenc.errors import CheckpointError
from posenc.training import checkpoint as ck
from posenc.training.averaging import best_steps, save_average, to_average
from posenc.training.config import TrainConfig
from posenc.training.distributed import DistInfo, barrier
from posenc.training.logging import log
from posenc.training.rng import rank_states, restore_rank_states


@dataclass
class TrainState:
    """Everything about the loop's position that a checkpoint must restore.

    Args:
        step: optimizer updates done.
        epoch: completed epochs.
        batch_index: micro-batches of the current epoch already consumed.
        tokens: target tokens trained on, all ranks.
        wall_s: the training wall clock in seconds up to the last save.
        best_valid: the best validation loss (its moving average with ``train.smooth_window``
            > 1) patience compares with; None before the first validation.
        bad_validations: validations in a row without an improvement (the patience counter).
        valid_history: every validation so far, ``[step, loss]`` each.
    """

    step: int = 0  # optimizer updates done
    epoch: int = 0  # completed epochs
    batch_index: int = 0  # micro-batches of the current epoch already consumed
    tokens: int = 0  # target tokens trained on, all ranks
    wall_s: float = 0.0  # training wall clock (seconds) up to the last save
    best_valid: float | None = None
    bad_validations: int = 0
    valid_history: list[list[float]] = field(default_factory=list)  # [step, validation loss]

    def valid_loss_at(self, step: int) -> float | None:
        """The validation loss measured at a step.

        Args:
            step: the update.

        Returns:
            The (last) validation loss recorded at ``step``, or None when none ran there.
        """
        found = [loss for s, loss in self.valid_history if int(s) == step]
        return found[-1] if found else None


@dataclass(frozen=True)
class RunContents:
    """What a run keeps with every checkpoint beside the training state: the run's own, which the
    Trainer stores and never interprets.

    Args:
        sections: config sections of each checkpoint's config.yaml (a dataclass becomes a dict;
            ``model`` defaults to ``model.cfg``, ``train`` is always the run's TrainConfig).
        record: the run's record, kept in every state.json (``record``) for the run's opener to judge.
        checked: state.json entries that a checkpoint resumed from must store alike (a key it lacks
            is not checked), and that checkpoints averaged together must share (e.g. a hash of the
            task's data).
        summary: the run's own entries of its ``summary.json``, written with the Trainer's.
    """

    sections: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] | None = None
    checked: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def config_sections(model: nn.Module, cfg: TrainConfig, config: dict[str, Any] | None) -> dict[str, Any]:
    """Config sections stored with every checkpoint: ``config`` (a dataclass section becomes a
    dict) plus ``model`` (from ``model.cfg`` when absent) and ``train``, as plain YAML-safe types.

    Args:
        model: the model trained (its ``cfg``, a dataclass, is the ``model`` section when
            ``config`` has none).
        cfg: the training config, the ``train`` section.
        config: the run's own sections by name (dataclasses or dicts); None for none.

    Returns:
        The sections by name, as plain JSON- and YAML-safe types.
    """
    plain = lambda v: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v  # noqa: E731
    sections = {k: plain(v) for k, v in (config or {}).items()}
    model_cfg = getattr(model, "cfg", None)
    if "model" not in sections and dataclasses.is_dataclass(model_cfg):
        sections["model"] = plain(model_cfg)
    sections["train"] = plain(cfg)
    return json.loads(json.dumps(sections))


class StateStore:
    """Saves and restores the training state under ``ckpt_dir`` (rank 0 writes, all ranks sync),
    with the run's :class:`RunContents`.

    Args:
        ckpt_dir: the run's ``checkpoints/`` directory.
        cfg: the training config (``keep_last``, ``average_best``, ``average_last``, ``seed``).
        dist: the process group's description.
        device: this rank's device.
        sections: the config sections of every checkpoint's config.yaml (:func:`config_sections`).
        contents: what the run keeps with every checkpoint (its record and ``checked`` entries).
    """

    def __init__(self, ckpt_dir: Path, cfg: TrainConfig, dist: DistInfo, device: torch.device,
                 sections: dict[str, Any], contents: RunContents) -> None:
        self.ckpt_dir, self.cfg, self.dist, self.device = ckpt_dir, cfg, dist, device
        self.sections, self.contents = sections, contents

    # ------------------------------------------------------------------ save
    def save(self, state: TrainState, model: nn.Module, optimizer: Any, scheduler: Any, scaler: Any) -> Path:
        """Checkpoint ``state`` with the weights, optimizer, schedule, scaler and RNG states, then
        prune old checkpoints (keeping the best ``average_best``). A collective: every rank calls
        it, rank 0 writes.

        Args:
            state: the loop's state after its last update.
            model: the model (unwrapped: its state-dict keys are what a checkpoint stores).
            optimizer: the optimizer.
            scheduler: the learning-rate schedule.
            scaler: the fp16 gradient scaler, or None.

        Returns:
            The checkpoint directory (``ckpt_<step>``).
        """
        rng_tensors, hosts = rank_states(self.dist, self.device)
        path = self.ckpt_dir / ck.checkpoint_name(state.step)
        barrier(self.dist)
        if self.dist.is_main:
            record = self.contents.record
            payload = {
                **self.contents.checked, "kind": "train", "step": state.step, "train": dataclasses.asdict(state),
                "valid_loss": state.valid_loss_at(state.step), "world_size": self.dist.world_size,
                "rng": {"host": hosts}, "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else None,
                **({"record": record} if record is not None else {}),
            }
            ck.save_checkpoint(path, model.state_dict(), state=payload, config=self.sections,
                               optim_state=optimizer.state_dict(), tensors=rng_tensors)
            ck.prune(self.ckpt_dir, self.cfg.keep_last, self._protected(state))
        barrier(self.dist)
        return path

    def _protected(self, state: TrainState) -> set[int]:
        """The steps pruning keeps: the best ``average_best`` checkpoints so far."""
        if self.cfg.average_best <= 1:
            return set()
        saved = [ck.checkpoint_step(p) for p in ck.list_checkpoints(self.ckpt_dir)]
        return set(best_steps(state.valid_history, saved, self.cfg.average_best))

    # ------------------------------------------------------------------ resume
    def resume(self, ckpt: ck.Checkpoint, model: nn.Module, optimizer: Any, scheduler: Any, scaler: Any) -> TrainState:
        """Restore the weights, optimizer, schedule, scaler and this rank's generators from ``ckpt``
        (loaded once by the caller).

        Args:
            ckpt: the checkpoint, loaded with its optimizer tensors.
            model: the model (unwrapped) to load the weights into.
            optimizer: the optimizer built for this run.
            scheduler: the learning-rate schedule built for this run.
            scaler: the fp16 gradient scaler, or None.

        Returns:
            The loop's state at that checkpoint.

        Raises:
            CheckpointError: one line, when ``ckpt`` does not fit this run (model-only, another
                ``checked`` entry, other weights, or an optimizer or training state that does not load).
        """
        ck.check_resumable(ckpt, self.contents.checked)
        ck.restore_model(model, ckpt)
        try:
            ck.load_optimizer_state(optimizer, ckpt.optimizer_state())
            scheduler.load_state_dict(ckpt.state["scheduler"])
            if scaler is not None and ckpt.state.get("scaler"):
                scaler.load_state_dict(ckpt.state["scaler"])
            state = TrainState(**ckpt.state["train"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{ckpt.path}: optimizer/training state does not fit this run ({err})") from None
        restore_rank_states(ckpt, self.dist, self.device, reseed=self.cfg.seed + 7919 * state.step + self.dist.rank)
        log.info("resumed from %s at step %d", ckpt.path, state.step)
        return state

    # ------------------------------------------------------------------ averaging
    def average(self, state: TrainState) -> tuple[Path | None, list[str]]:
        """Average the best ``average_best`` checkpoints by validation loss, else the last
        ``average_last``, into ``checkpoints/average``. A collective: every rank calls it, rank 0
        writes.

        Args:
            state: the loop's final state (its validation history chooses the best).

        Returns:
            ``(path, names)``: the average's directory and the names of the checkpoints averaged;
            ``(None, [])`` when averaging is off.
        """
        paths = to_average(self.cfg, state.valid_history, ck.list_checkpoints(self.ckpt_dir))
        if not paths:
            return None, []
        out = self.ckpt_dir / "average"
        if self.dist.is_main:
            save_average(paths, out, tuple(self.contents.checked), self.contents.record)
        barrier(self.dist)
        return out, [p.name for p in paths]
