"""Optimization: the optimizer (``train.optimizer``), the gradient norm and clipping, and the
learning-rate schedule, chosen by name (``train.schedule``):

* ``noam`` (Vaswani et al. 2017, §5.3; SHAPE App. Table 4)::

      lr(n) = scale · d_model^-0.5 · min(n^-0.5, n · warmup^-1.5)

  for the n-th optimizer update, n = 1, 2, ...: linear warm-up for ``warmup`` updates, then
  inverse-square-root decay. ``scale`` is ``train.lr`` (OpenNMT-py's "learning rate"; SHAPE uses 2).
* ``cosine``: linear warm-up to ``train.lr`` over W updates, then cosine decay to
  ``train.lr_floor · train.lr`` at the last update (the ViT recipe of DeiT used for CAPE §5.1, and
  the CTC recipe of CAPE §5.2). W is ``train.warmup_fraction`` of all updates when that is > 0,
  else ``train.warmup``; the total is ``train.max_steps`` or the updates of ``max_epochs`` epochs.

Each schedule is a ``LambdaLR`` whose lambda is a ``partial`` of a module-level function, so
``state_dict()`` stays JSON-serialisable (checkpoints store it as JSON).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from posenc.errors import ConfigError
from posenc.training.config import TrainConfig


def total_norm(params: list[nn.Parameter], clip_norm: float) -> torch.Tensor:
    """The global L2 norm of the gradients, clipping them first where asked.

    Args:
        params: the model's parameters (those without a gradient are skipped).
        clip_norm: clip the gradients so their global norm is at most this; 0 = no clipping.

    Returns:
        The global L2 norm of the gradients before clipping, a scalar tensor (no host sync); 0
        when no parameter has a gradient.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if clip_norm > 0:
        return nn.utils.clip_grad_norm_(params, clip_norm)
    if hasattr(nn.utils, "get_total_norm"):
        return nn.utils.get_total_norm(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


#: torch's fused Adam/AdamW run on the CPU from 2.4 on.
_CPU_FUSED_ADAM = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 4)


def build_optimizer(
    params: list[nn.Parameter], cfg: TrainConfig, device: torch.device | None = None
) -> torch.optim.Optimizer:
    """``train.optimizer``: Adam (L2 ``weight_decay`` in the gradient) or AdamW (decoupled).

    The fused kernel (``fused=True``: one pass over all parameters) on CUDA, and on the CPU where
    torch has it (2.4 and later; the faster one there, docs/perf/cpu_step.md), else the
    multi-tensor ``foreach`` implementation; all compute the same update (Kingma & Ba 2015, Alg. 1; AdamW: Loshchilov &
    Hutter 2019, Alg. 2), the fused one with its own rounding (a few float32 ulps).

    Args:
        params: the parameters to optimize.
        cfg: the training config (``optimizer``, ``lr``, ``betas``, ``eps``, ``weight_decay``).
        device: the device the parameters are on, which picks the implementation; None: foreach.

    Returns:
        A ``torch.optim.Adam`` or ``torch.optim.AdamW``; its ``lr`` is ``cfg.lr``, which the
        schedule scales.
    """
    kind = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    fused = device is not None and (device.type == "cuda" or (device.type == "cpu" and _CPU_FUSED_ADAM))
    impl = {"fused": True} if fused else {"foreach": True}
    return kind(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay, **impl)


# ----------------------------------------------------------------------------- schedules
def noam_factor(step: int, d_model: int, warmup: int) -> float:
    """The Noam schedule's learning-rate factor, without the scale.

    Args:
        step: the optimizer update, 1-based.
        d_model: the model width.
        warmup: the warm-up updates.

    Returns:
        ``d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)``; 0 for ``step <= 0``.
    """
    if step <= 0:
        return 0.0
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The Noam learning rate of the ``step``-th update.

    Args:
        step: the optimizer update, 1-based.
        d_model: the model width.
        warmup: the warm-up updates.
        scale: the scaling factor (``train.lr``).

    Returns:
        ``scale · noam_factor(step, d_model, warmup)``.
    """
    return scale * noam_factor(step, d_model, warmup)


def _update_factor(index: int, d_model: int, warmup: int) -> float:
    # LambdaLR counts from 0 (value at construction); the optimizer update made with that value
    # is the first one, so index i ↦ update i + 1.
    return noam_factor(index + 1, d_model, warmup)


def noam_scheduler(optimizer: Optimizer, d_model: int, warmup: int) -> LambdaLR:
    """LambdaLR multiplying each group's base lr (= the scale) by the Noam factor.

    After construction the lr is ``noam_lr(1)``; after ``k`` calls of ``.step()`` it is
    ``noam_lr(k + 1)``, i.e. the value used by update ``k + 1``.

    Args:
        optimizer: the optimizer, its groups' ``lr`` the scale.
        d_model: the model width.
        warmup: the warm-up updates.

    Returns:
        The scheduler (its state_dict JSON-safe).
    """
    return LambdaLR(optimizer, partial(_update_factor, d_model=d_model, warmup=warmup))


def cosine_factor(index: int, total: int, warmup: int, floor: float = 0.0) -> float:
    """Factor of the update with 0-based ``index``: ``(index + 1) / warmup`` while
    ``index < warmup``, then ``floor + (1 − floor) · ½(1 + cos(π · progress))`` with
    ``progress = (index − warmup) / max(1, total − warmup)`` clipped to 1.

    Args:
        index: the update, 0-based.
        total: the run's total updates.
        warmup: the warm-up updates.
        floor: the final factor.

    Returns:
        The factor the peak learning rate is multiplied by.
    """
    if index < warmup:
        return (index + 1) / warmup
    progress = min(1.0, (index - warmup) / max(1, total - warmup))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def cosine_scheduler(optimizer: Optimizer, total: int, warmup: int, floor: float = 0.0) -> LambdaLR:
    """LambdaLR with :func:`cosine_factor`; update ``i + 1`` uses the factor of index ``i``.

    Args:
        optimizer: the optimizer, its groups' ``lr`` the peak learning rate.
        total: the run's total updates.
        warmup: the warm-up updates.
        floor: the final learning rate as a fraction of the peak.

    Returns:
        The scheduler (its state_dict JSON-safe).
    """
    return LambdaLR(optimizer, partial(cosine_factor, total=total, warmup=warmup, floor=floor))


def _noam(optimizer: Optimizer, cfg: TrainConfig, d_model: int | None, total: int) -> LambdaLR:
    if not isinstance(d_model, int) or d_model < 1:
        raise ConfigError("train.schedule=noam needs d_model (pass d_model= to the Trainer or give the model a .cfg)")
    return noam_scheduler(optimizer, d_model, cfg.warmup)


def _cosine(optimizer: Optimizer, cfg: TrainConfig, d_model: int | None, total: int) -> LambdaLR:
    warmup = int(cfg.warmup_fraction * total) if cfg.warmup_fraction > 0 else cfg.warmup
    return cosine_scheduler(optimizer, total, warmup, cfg.lr_floor)


def constant_factor(index: int, warmup: int) -> float:
    """``(index + 1) / warmup`` while ``index < warmup``, then 1: the peak lr held (the fixed Adam
    learning rate of Ruoss et al. 2023's public code, with an optional linear warm-up).

    Args:
        index: the update, 0-based.
        warmup: the warm-up updates.

    Returns:
        The factor the peak learning rate is multiplied by.
    """
    return (index + 1) / warmup if index < warmup else 1.0


def _constant(optimizer: Optimizer, cfg: TrainConfig, d_model: int | None, total: int) -> LambdaLR:
    warmup = int(cfg.warmup_fraction * total) if cfg.warmup_fraction > 0 else cfg.warmup
    return LambdaLR(optimizer, partial(constant_factor, warmup=warmup))


SchedulerBuilder = Callable[[Optimizer, TrainConfig, "int | None", int], LambdaLR]

#: ``train.schedule`` name → builder(optimizer, cfg, d_model, total updates).
SCHEDULES: dict[str, SchedulerBuilder] = {"noam": _noam, "cosine": _cosine, "constant": _constant}


def total_updates(cfg: TrainConfig, first_epoch_batches: Callable[[], int]) -> int:
    """Updates of the whole run: ``max_steps``, or those of ``max_epochs`` epochs (the first
    epoch's batch count, from ``first_epoch_batches()``, times the epochs), whichever is smaller.
    Noam does not need the total (0 when only epochs limit the run).

    Args:
        cfg: the training config (``max_steps``, ``max_epochs``, ``update_freq``, ``schedule``).
        first_epoch_batches: counts the batches of the first epoch; called only when epochs
            limit a run whose schedule needs the total.

    Returns:
        The run's total optimizer updates.
    """
    if cfg.max_epochs == 0 or cfg.schedule == "noam":
        return cfg.max_steps
    epochs = math.ceil(first_epoch_batches() / cfg.update_freq) * cfg.max_epochs
    return min(epochs, cfg.max_steps) if cfg.max_steps else epochs


def build_scheduler(optimizer: Optimizer, cfg: TrainConfig, d_model: int | None, total: int) -> LambdaLR:
    """The schedule named by ``cfg.schedule`` for a run of ``total`` optimizer updates.

    Args:
        optimizer: the optimizer whose learning rate it schedules.
        cfg: the training config.
        d_model: the model width, which ``noam`` needs; None where unknown.
        total: the run's total updates (:func:`total_updates`).

    Returns:
        A ``LambdaLR`` (its state_dict JSON-safe).

    Raises:
        ConfigError: the schedule is unknown, or ``noam`` without a ``d_model``.
    """
    if cfg.schedule not in SCHEDULES:
        raise ConfigError(f"train.schedule {cfg.schedule!r} unknown (known: {', '.join(SCHEDULES)})")
    return SCHEDULES[cfg.schedule](optimizer, cfg, d_model, total)
