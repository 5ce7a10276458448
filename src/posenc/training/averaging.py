"""Checkpoint averaging: the element-wise mean of the weights of several checkpoints of one run
(Vaswani et al. 2017, §6.1; SHAPE averages the last 10), chosen as the last N or the best N by
validation loss (``train.average_last`` / ``train.average_best``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from posenc.errors import CheckpointError
from posenc.training.checkpoint import (
    check_state_compatible,
    checkpoint_state,
    checkpoint_step,
    load_checkpoint,
    save_checkpoint,
)
from posenc.training.config import TrainConfig


def best_steps(history: list[list[float]], saved: list[int], n: int) -> list[int]:
    """The saved checkpoints of lowest validation loss. Checkpoints without a validation at their
    step are never chosen.

    Args:
        history: the run's validations, ``[step, loss]`` each (``TrainState.valid_history``).
        saved: the steps of the checkpoints on disk.
        n: how many to choose.

    Returns:
        The steps of the ``n`` (or fewer) checkpoints of lowest loss (ties: the later step), in
        step order.
    """
    losses = {int(s): loss for s, loss in history}
    scored = sorted((losses[s], -s) for s in saved if s in losses)
    return sorted(-neg for _, neg in scored[:n])


def to_average(cfg: TrainConfig, history: list[list[float]], saved: list[Path]) -> list[Path]:
    """The checkpoints to average at the end of a run. A warning when fewer than asked for
    qualify (those are averaged).

    Args:
        cfg: the run's training config (its ``average_best`` and ``average_last``).
        history: the run's validations, ``[step, loss]`` each.
        saved: the checkpoint directories on disk, oldest first.

    Returns:
        The best ``average_best`` of ``saved`` by validation loss, else the last ``average_last``,
        in step order; empty when both are 0 or 1.
    """
    if cfg.average_best > 1:
        n, what = cfg.average_best, "average_best"
        chosen = set(best_steps(history, [checkpoint_step(p) for p in saved], n))
        paths = [p for p in saved if checkpoint_step(p) in chosen]
    elif cfg.average_last > 1:
        n, what = cfg.average_last, "average_last"
        paths = saved[-n:]
    else:
        return []
    if len(paths) < n:
        warnings.warn(f"train.{what}={n} but only {len(paths)} checkpoints qualify; averaging those", stacklevel=3)
    return paths


def average_checkpoints(paths: list[str | Path]) -> dict[str, Tensor]:
    """Element-wise mean of the model weights of ``paths`` (accumulated in float64, cast back).

    Non-floating tensors (integer buffers) must agree and are copied. Tied weights stay tied.

    Args:
        paths: the checkpoint directories to average, at least one.

    Returns:
        The averaged state dict (every key of the first checkpoint, aliases included), on the CPU.

    Raises:
        CheckpointError: no paths, a checkpoint does not load, the checkpoints' keys or shapes
            differ, or a non-float buffer differs between them.
    """
    if not paths:
        raise CheckpointError("average_checkpoints: no checkpoints given")
    first = load_checkpoint(paths[0], with_optimizer=False).model
    sums = {k: v.to(torch.float64) if v.is_floating_point() else v for k, v in first.items()}
    for path in paths[1:]:
        other = load_checkpoint(path, with_optimizer=False).model
        check_state_compatible(other, first, str(path))
        for key, value in other.items():
            if value.is_floating_point():
                sums[key] = sums[key] + value.to(torch.float64)
            elif not torch.equal(value, first[key]):
                raise CheckpointError(f"{path}: non-float buffer {key!r} differs between checkpoints")
    out: dict[str, Tensor] = {}
    done: dict[int, Tensor] = {}
    for key, value in first.items():
        if id(value) not in done:
            done[id(value)] = (sums[key] / len(paths)).to(value.dtype) if value.is_floating_point() else value
        out[key] = done[id(value)]
    return out


def _shared(paths: list[Path], keys: tuple[str, ...]) -> dict[str, Any]:
    """The entries ``keys`` of the checkpoints' state.json that the checkpoints ``paths`` store
    (a key none stores is left out); checkpoints that store different values are a CheckpointError."""
    shared: dict[str, Any] = {}
    for key in keys:
        stored = [(p, v) for p in paths if (v := checkpoint_state(p).get(key)) is not None]
        for path, value in stored[1:]:
            if value != stored[0][1]:
                raise CheckpointError(f"{stored[0][0].name} and {path.name} store another {key} "
                                      f"({str(stored[0][1])[:12]}, {str(value)[:12]}); they cannot be averaged")
        if stored:
            shared[key] = stored[0][1]
    return shared


def save_average(paths: list[str | Path], out: str | Path, shared: tuple[str, ...] = (),
                 record: dict[str, Any] | None = None) -> Path:
    """Average ``paths`` and save the result as a model-only checkpoint directory ``out``.

    Args:
        paths: the checkpoint directories to average, oldest first (the last gives the step and
            config the average stores).
        out: the checkpoint directory to write (replaced atomically).
        shared: the state.json entries to keep (e.g. a hash of the task's data), which must be
            the same in every checkpoint that stores them.
        record: the record of the run the checkpoints are of, stored as the average's ``record``
            (as every checkpoint of the run stores it), so its opener knows the average as the
            run's without judging it again; None stores none.

    Returns:
        ``out``, as a path.

    Raises:
        CheckpointError: the checkpoints cannot be averaged (:func:`average_checkpoints`), store
            different ``shared`` entries, or the average cannot be written.
    """
    paths = [Path(p) for p in paths]
    kept = _shared(paths, shared)
    weights = average_checkpoints(paths)
    last = load_checkpoint(paths[-1], with_optimizer=False)
    state = {"kind": "average", "step": last.step, "averaged_from": [p.name for p in paths], **kept,
             **({"record": record} if record is not None else {})}
    return save_checkpoint(out, weights, state=state, config=last.config)

