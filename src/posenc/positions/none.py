"""No input-layer positions: the embeddings pass through unchanged (``nopos``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from posenc.positions.base import InputPosition
from posenc.positions.registry import register


@dataclass
class NoParams:
    """No options."""


@register("input", "none", NoParams,
          paper="Kazemnejad et al. 2023", what="no positions (NoPE)")
class NoPosition(InputPosition):
    """No input-layer positions: the embeddings pass through.

    Args:
        d_model: model width (not read).
        params: no options.
    """

    def __init__(self, d_model: int, params: NoParams, **_: Any) -> None:
        super().__init__()

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, state: dict | None = None) -> Tensor:
        """The embeddings unchanged.

        Args:
            x: token embeddings ``(B, L, D)``.
            positions: float positions ``(B, L)`` (not read).
            mask: ``(B, L)`` (not read).
            state: incremental decoding's dict (not read).

        Returns:
            ``x`` itself.
        """
        return x

    def ct2_table(self, rows: int, offset: int) -> None:
        """Nothing is added (the export writes an all-zero table where CTranslate2 would add a sinusoid).

        Args:
            rows: how many positions (not read).
            offset: the first position (not read).
        """
        return None
