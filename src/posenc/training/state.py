"""State persistence of the training loop: what a checkpoint holds, exact resume (optimizer,
schedule, scaler, every rank's RNG states), pruning and checkpoint averaging (last N or best N by
validation loss); the run's result and summary are :mod:`posenc.training.result`.

Every checkpoint's ``state.json`` records the validation loss measured at its step
(``valid_loss``, None when no validation ran there) and the loop's :class:`TrainState`, whose
``valid_history`` lists every validation ``[step, loss]`` so far: best-N selection, pruning and
the patience counter therefore survive a resume.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from posenc.errors import CheckpointError
from posenc.training import checkpoint as ck
from posenc.training.config import TrainConfig
from posenc.training.convergence import is_flat
from posenc.training.distributed import DistInfo, barrier
from posenc.training.logging import log
from posenc.training.rng import rank_states, restore_rank_states


@dataclass
class TrainState:
    """Everything about the loop's position that a checkpoint must restore."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # completed epochs
    batch_index: int = 0  # micro-batches of the current epoch already consumed
    tokens: int = 0  # target tokens trained on, all ranks
    wall_s: float = 0.0  # training wall clock (seconds) up to the last save
    best_valid: float | None = None
    bad_validations: int = 0
    valid_history: list[list[float]] = field(default_factory=list)  # [step, validation loss]

    def valid_loss_at(self, step: int) -> float | None:
        """The validation loss measured at ``step``, or None."""
        found = [loss for s, loss in self.valid_history if int(s) == step]
        return found[-1] if found else None


def best_steps(history: list[list[float]], saved: list[int], n: int) -> list[int]:
    """Steps of the ``n`` saved checkpoints of lowest validation loss (ties: the later step),
    in step order. Checkpoints without a validation at their step are never chosen."""
    losses = {int(s): loss for s, loss in history}
    scored = sorted((losses[s], -s) for s in saved if s in losses)
    return sorted(-neg for _, neg in scored[:n])


def checkpoint_step(path: Path) -> int:
    return int(path.name.split("_")[-1])


def prune(directory: Path, keep_last: int, protect: set[int]) -> list[Path]:
    """Delete all but the newest ``keep_last`` checkpoints (0 = keep all), never deleting the
    steps in ``protect`` (the best N); returns the deleted directories."""
    ckpts = ck.list_checkpoints(directory)
    if keep_last <= 0 or len(ckpts) <= keep_last:
        return []
    doomed = [p for p in ckpts[: len(ckpts) - keep_last] if checkpoint_step(p) not in protect]
    for p in doomed:
        ck.remove_checkpoint(p)  # its checkpoint files only: a user's file there stays
    return doomed


def smoothed(history: list[list[float]], window: int) -> float:
    """The mean of the last ``window`` validation losses of ``history`` (1: the last loss)."""
    last = [float(v) for _, v in history[-window:]]
    return sum(last) / len(last)


def record_validation(state: TrainState, loss: float, cfg: TrainConfig) -> bool:
    """Add a validation loss to ``state`` and update the patience counter; True = stop.

    An improvement lowers the best loss by more than ``train.min_delta`` (relative) and by more
    than ``train.min_delta_abs`` (nats); ``train.patience`` validations without one stop training.
    With ``train.smooth_window`` W > 1 the loss compared is the moving average of the last W
    validations (``state.best_valid`` is then the best moving average), and with
    ``train.require_flat`` patience only stops once the last validations no longer fall
    significantly (:func:`posenc.training.convergence.is_flat`). Defaults (1, False): the raw rule."""
    state.valid_history.append([state.step, loss])
    value = smoothed(state.valid_history, cfg.smooth_window)
    best = state.best_valid
    if best is None or value < best - max(best * cfg.min_delta, cfg.min_delta_abs):
        state.best_valid, state.bad_validations = value, 0
    else:
        state.bad_validations += 1
    return patience_ran_out(state, cfg)


def patience_ran_out(state: TrainState, cfg: TrainConfig) -> bool:
    """``train.patience`` validations without an improvement (and, with ``train.require_flat``, a
    validation curve that no longer falls significantly): the run stops, or stays stopped on resume."""
    if cfg.patience is None or state.bad_validations < cfg.patience:
        return False
    return not cfg.require_flat or bool(is_flat(state.valid_history))


def config_sections(model: nn.Module, cfg: TrainConfig, config: dict[str, Any] | None) -> dict[str, Any]:
    """Config sections stored with every checkpoint: ``config`` (a dataclass section becomes a
    dict) plus ``model`` (from ``model.cfg`` when absent) and ``train``, as plain YAML-safe types."""
    plain = lambda v: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v  # noqa: E731
    sections = {k: plain(v) for k, v in (config or {}).items()}
    model_cfg = getattr(model, "cfg", None)
    if "model" not in sections and dataclasses.is_dataclass(model_cfg):
        sections["model"] = plain(model_cfg)
    sections["train"] = plain(cfg)
    return json.loads(json.dumps(sections))


class StateStore:
    """Saves and restores the training state under ``ckpt_dir`` (rank 0 writes, all ranks sync).
    ``extra`` (JSON values, e.g. the vocabulary's hash) goes into every checkpoint's state.json and
    must be the same in a checkpoint resumed from (a key the checkpoint lacks is not checked)."""

    def __init__(self, ckpt_dir: Path, cfg: TrainConfig, dist: DistInfo, device: torch.device, config: dict[str, Any],
                 record: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> None:
        self.ckpt_dir, self.cfg, self.dist, self.device, self.config = ckpt_dir, cfg, dist, device, config
        self.record = record  # the run's record (posenc.runs.same_run.RunRecord.to_dict), kept in every state
        self.extra = dict(extra or {})

    # ------------------------------------------------------------------ save
    def save(self, state: TrainState, model: nn.Module, optimizer: Any, scheduler: Any, scaler: Any) -> Path:
        """Checkpoint ``state`` with the weights, optimizer, schedule, scaler and RNG states."""
        rng_tensors, hosts = rank_states(self.dist, self.device)
        path = self.ckpt_dir / ck.checkpoint_name(state.step)
        barrier(self.dist)
        if self.dist.is_main:
            payload = {
                **self.extra, "kind": "train", "step": state.step, "train": dataclasses.asdict(state),
                "valid_loss": state.valid_loss_at(state.step), "world_size": self.dist.world_size,
                "rng": {"host": hosts}, "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else None,
                **({"record": self.record} if self.record is not None else {}),
            }
            ck.save_checkpoint(path, model.state_dict(), state=payload, config=self.config,
                               optim_state=optimizer.state_dict(), tensors=rng_tensors)
            prune(self.ckpt_dir, self.cfg.keep_last, self._protected(state))
        barrier(self.dist)
        return path

    def _protected(self, state: TrainState) -> set[int]:
        if self.cfg.average_best <= 1:
            return set()
        saved = [checkpoint_step(p) for p in ck.list_checkpoints(self.ckpt_dir)]
        return set(best_steps(state.valid_history, saved, self.cfg.average_best))

    # ------------------------------------------------------------------ resume
    def resume(
        self, source: bool | str | Path, model: nn.Module, optimizer: Any, scheduler: Any, scaler: Any
    ) -> TrainState | None:
        """Restore everything from ``source`` (True: the latest checkpoint; a path; False: none).
        Returns the restored state, or None when there was nothing to resume from."""
        if source is False or source is None:
            return None
        path = ck.latest_checkpoint(self.ckpt_dir) if source is True else Path(source)
        if path is None:
            return None
        ckpt = ck.load_resumable(path, self.extra)
        ck.restore_model(model, ckpt)
        try:
            ck.load_optimizer_state(optimizer, ckpt.optimizer_state())
            scheduler.load_state_dict(ckpt.state["scheduler"])
            if scaler is not None and ckpt.state.get("scaler"):
                scaler.load_state_dict(ckpt.state["scaler"])
            state = TrainState(**ckpt.state["train"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{path}: optimizer/training state does not fit this run ({err})") from None
        restore_rank_states(ckpt, self.dist, self.device, reseed=self.cfg.seed + 7919 * state.step + self.dist.rank)
        log.info("resumed from %s at step %d", path, state.step)
        return state

    # ------------------------------------------------------------------ averaging
    def average(self, state: TrainState) -> tuple[Path | None, list[str]]:
        """Average the best ``average_best`` checkpoints by validation loss, else the last
        ``average_last``, into ``checkpoints/average``; returns (path, averaged names)."""
        paths = self._to_average(state)
        if not paths:
            return None, []
        out = self.ckpt_dir / "average"
        if self.dist.is_main:
            ck.save_average(paths, out)
        barrier(self.dist)
        return out, [p.name for p in paths]

    def _to_average(self, state: TrainState) -> list[Path]:
        cfg, saved = self.cfg, ck.list_checkpoints(self.ckpt_dir)
        if cfg.average_best > 1:
            n, what = cfg.average_best, "average_best"
            chosen = set(best_steps(state.valid_history, [checkpoint_step(p) for p in saved], n))
            paths = [p for p in saved if checkpoint_step(p) in chosen]
        elif cfg.average_last > 1:
            n, what = cfg.average_last, "average_last"
            paths = saved[-n:]
        else:
            return []
        if len(paths) < n:
            warnings.warn(f"train.{what}={n} but only {len(paths)} checkpoints qualify; averaging those", stacklevel=3)
        return paths
