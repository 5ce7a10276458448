"""The "Noam" learning-rate schedule (Vaswani et al. 2017, §5.3; SHAPE App. Table 4).

    lr(n) = scale · d_model^-0.5 · min(n^-0.5, n · warmup^-1.5)

for the n-th optimizer update, n = 1, 2, ...: linear warm-up for ``warmup`` updates, then
inverse-square-root decay. ``scale`` is OpenNMT-py's "learning rate" (SHAPE uses 2).
"""

from __future__ import annotations

from functools import partial

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def noam_factor(step: int, d_model: int, warmup: int) -> float:
    """``d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)``; 0 for ``step <= 0``."""
    if step <= 0:
        return 0.0
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """Learning rate of the ``step``-th update (1-based)."""
    return scale * noam_factor(step, d_model, warmup)


def _update_factor(index: int, d_model: int, warmup: int) -> float:
    # LambdaLR counts from 0 (value at construction); the optimizer update made with that value
    # is the first one, so index i ↦ update i + 1.
    return noam_factor(index + 1, d_model, warmup)


def noam_scheduler(optimizer: Optimizer, d_model: int, warmup: int) -> LambdaLR:
    """LambdaLR multiplying each group's base lr (= the scale) by the Noam factor.

    After construction the lr is ``noam_lr(1)``; after ``k`` calls of ``.step()`` it is
    ``noam_lr(k + 1)``, i.e. the value used by update ``k + 1``. The lambda is a ``partial`` of
    a module-level function, so ``state_dict()`` stays JSON-serialisable.
    """
    return LambdaLR(optimizer, partial(_update_factor, d_model=d_model, warmup=warmup))
