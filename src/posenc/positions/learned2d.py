"""``learned-2d``: ViT/DeiT *abspos*, a learned ``(gh, gw, D)`` table for the training grid,
bicubically interpolated to another grid (DeiT, as used in CAPE §5.1); the CLS token has its own
learned position, never interpolated (CAPE §5.1 footnote 5)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.config import require
from posenc.positions.grid2d import Input2d, grid_shape
from posenc.positions.registry import register


@dataclass
class Learned2dParams:
    """Options of the learned 2-D table (each field's meaning in the ``#:`` comment above it)."""

    #: training patch grid (gh, gw); the ViT resolves it
    grid: list[int] = field(default_factory=lambda: [7, 7])

    def __post_init__(self) -> None:
        require(len(self.grid) == 2 and min(self.grid) >= 1, f"learned2d.grid must be two sizes >= 1, got {self.grid}")


@register("input", "learned2d", Learned2dParams, layout="grid",
          paper="Dosovitskiy et al. 2021", what="a learned table of patch positions (ViT), resized to other grids")
class LearnedPosition2d(Input2d):
    """x + table resized to the grid of ``positions (B, N, 2)``.

    Args:
        d_model: model width D.
        params: the method's options (the training grid).
    """

    def __init__(self, d_model: int, params: Learned2dParams, **_: Any) -> None:
        super().__init__()
        self.train_grid = tuple(params.grid)
        self.table = nn.Parameter(torch.empty(*params.grid, d_model))
        self.cls = nn.Parameter(torch.empty(d_model))
        nn.init.trunc_normal_(self.table, std=0.02)
        nn.init.trunc_normal_(self.cls, std=0.02)

    def grid_table(self, grid: tuple[int, int]) -> Tensor:
        """The table resized to ``grid`` (bicubic, align_corners=False).

        At the training grid this is the identity (the bicubic kernel at zero offset is 1).

        Args:
            grid: the patch grid ``(gh, gw)``.

        Returns:
            The table, row-major, ``(gh·gw, D)``.
        """
        chw = self.table.permute(2, 0, 1).unsqueeze(0)  # (1, D, gh0, gw0)
        out = F.interpolate(chw, size=tuple(grid), mode="bicubic", align_corners=False)
        return out[0].permute(1, 2, 0).reshape(grid[0] * grid[1], -1)

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, state: dict | None = None) -> Tensor:
        """Add the table resized to the patch grid.

        Args:
            x: patch embeddings ``(B, N, D)``.
            positions: mean-normalised patch centres ``(B, N, 2)``.
            mask: ``(B, N)`` (not read).
            state: ``{"grid": (gh, gw)}`` from the ViT, which spares reading the grid from the
                positions (a host sync); None reads it.

        Returns:
            The embeddings with positions ``(B, N, D)``.

        Raises:
            DataError: the centres are not a full grid.
        """
        return x + self.grid_table(grid_shape(positions, (state or {}).get("grid"))).to(x.dtype)

    def cls_position(self) -> Tensor | None:
        """The CLS token's own learned position.

        Returns:
            The embedding ``(D,)``.
        """
        return self.cls
