"""``sinusoidal-2d``: CAPE's *sinpos* (Eq. 3-4) of 2-D patch centres (see ``grid2d``).
The CLS token gets no position (it is already a unique learned vector)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from posenc.positions.grid2d import Input2d, cape_frequencies, sinusoidal_2d
from posenc.positions.registry import register


@dataclass
class Sinusoidal2dParams:
    """No options."""


@register("input", "sinusoidal2d", Sinusoidal2dParams, augmentable_by=("cape2d",), layout="grid",
          paper="Likhomanenko et al. 2021 (CAPE, images)", what="2-D sinusoidal patch positions (ViT)")
class SinusoidalPosition2d(Input2d):
    """x + sinpos(positions), positions ``(B, N, 2)``.

    Args:
        d_model: model width D, even.
        params: no options.
    """

    def __init__(self, d_model: int, params: Sinusoidal2dParams, **_: Any) -> None:
        super().__init__()
        w_x, w_y = cape_frequencies(d_model)
        self.register_buffer("w_x", w_x, persistent=False)
        self.register_buffer("w_y", w_y, persistent=False)

    def embed(self, positions: Tensor) -> Tensor:
        """CAPE's 2-D sinusoid of patch centres.

        Args:
            positions: patch centres ``(B, N, 2)``.

        Returns:
            Float32 embeddings ``(B, N, D)``.
        """
        return sinusoidal_2d(positions, self.w_x, self.w_y)

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, state: dict | None = None) -> Tensor:
        """Add the 2-D sinusoid of each patch centre.

        Args:
            x: patch embeddings ``(B, N, D)``.
            positions: patch centres ``(B, N, 2)``.
            mask: ``(B, N)`` (not read).
            state: the ViT's ``{"grid": ...}`` (not read).

        Returns:
            x + sinpos(positions), ``(B, N, D)``.
        """
        return x + self.embed(positions).to(x.dtype)
