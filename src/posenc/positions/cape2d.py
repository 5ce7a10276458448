"""``cape-2d`` augmentation (CAPE §4, steps ii-iv) over 2-D patch centres ``(B, N, 2)``.

In training: (positions + Δ + ε) · λ with a global shift Δ ~ U(−Δmax, Δmax) per image and axis
(Eq. 5), a local shift ε ~ U(−εmax, εmax) per patch and axis (Eq. 6) and a global scaling
log λ ~ U(−log λmax, log λmax) per image, shared by x and y (Eq. 7). In eval: the identity, so
``sinusoidal-2d+cape-2d`` in eval mode is exactly ``sinusoidal-2d``. Step i (mean normalisation)
is the model's: it hands mean-normalised centres to every 2-D method (see ``grid2d``).

``local_shift`` is εmax in units of 1/n (n = patches along that axis): 1.0 gives the paper's
εmax = 1/N, half the patch spacing 2/n, the largest value that keeps the patch order per axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.config import require
from posenc.positions.base import Augmentation
from posenc.positions.grid2d import grid_shape, grid_sizes_xy
from posenc.positions.registry import register


@dataclass
class Cape2dParams:
    """Options of CAPE over 2-D patch centres (each field's meaning in the ``#:`` comment above it)."""

    #: Δmax (Eq. 5), in [−1, 1] coordinate units
    max_global_shift: float = 0.5
    #: εmax = local_shift / n (Eq. 6)
    local_shift: float = 1.0
    #: λmax (Eq. 7)
    max_global_scaling: float = 1.4

    def __post_init__(self) -> None:
        require(self.max_global_shift >= 0, f"cape2d.max_global_shift must be >= 0, got {self.max_global_shift}")
        require(self.local_shift >= 0, f"cape2d.local_shift must be >= 0, got {self.local_shift}")
        require(self.max_global_scaling >= 1,
                f"cape2d.max_global_scaling (λmax) must be >= 1, got {self.max_global_scaling}")


def _uniform(shape: tuple[int, ...], bound: Tensor | float, like: Tensor) -> Tensor:
    """U(−bound, bound) samples of ``shape`` on ``like``'s device; ``bound`` (a number, or a tensor
    on that device that broadcasts over the last axis) is cast to ``like``'s dtype, as a number is."""
    u = torch.rand(shape, device=like.device, dtype=like.dtype) * 2 - 1
    return u * (bound.to(like.dtype) if isinstance(bound, Tensor) else bound)


@register("augment", "cape2d", Cape2dParams, layout="grid",
          paper="Likhomanenko et al. 2021 (CAPE)", what="CAPE on 2-D patch coordinates")
class CapeAugmentation2d(Augmentation):
    """CAPE steps ii-iv over mean-normalised 2-D patch centres in training; the identity in eval.

    Args:
        params: the method's options.
    """

    position_dims = 2

    def __init__(self, params: Cape2dParams, **_: Any) -> None:
        super().__init__()
        self.params = params

    def augment(self, positions: Tensor) -> Tensor:
        """The training transform: steps ii-iv of CAPE §4.

        Args:
            positions: mean-normalised patch centres ``(B, N, 2)`` of a full grid.

        Returns:
            The shifted, jittered and scaled centres ``(B, N, 2)``.

        Raises:
            DataError: on the CPU, when the centres do not form a full grid.
        """
        p, b = self.params, positions.shape[0]
        if positions.device.type == "cpu" and not torch.compiler.is_compiling():
            grid_shape(positions)  # a full grid (DataError otherwise): a free read on the CPU only
        shift = _uniform((b, 1, 2), p.max_global_shift, positions)  # (ii) Δx, Δy, Eq. 5
        local_max = p.local_shift / grid_sizes_xy(positions)  # (iii) Eq. 6: εmax = local_shift / n per axis: (gw, gh)
        local = _uniform(tuple(positions.shape), local_max, positions)
        log_scale = _uniform((b, 1, 1), math.log(p.max_global_scaling), positions)
        return (positions + shift + local) * log_scale.exp()  # (iv) λ shared by x and y, Eq. 7

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        """Augment patch centres in training; unchanged in eval.

        Args:
            positions: mean-normalised patch centres ``(B, N, 2)``.
            mask: ``(B, N)``, True at real patches (not read: every patch is real).

        Returns:
            The centres ``(B, N, 2)``.
        """
        return self.augment(positions) if self.training else positions
