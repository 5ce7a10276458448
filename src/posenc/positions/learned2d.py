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
    #: training patch grid (gh, gw); the ViT resolves it
    grid: list[int] = field(default_factory=lambda: [7, 7])

    def __post_init__(self) -> None:
        require(len(self.grid) == 2 and min(self.grid) >= 1, f"learned2d.grid must be two sizes >= 1, got {self.grid}")


@register("input", "learned2d", Learned2dParams, layout="grid",
          paper="Dosovitskiy et al. 2021", what="a learned table of patch positions (ViT), resized to other grids")
class LearnedPosition2d(Input2d):
    """x + table resized to the grid of ``positions (B, N, 2)``."""

    def __init__(self, d_model: int, params: Learned2dParams, **_: Any) -> None:
        super().__init__()
        self.train_grid = tuple(params.grid)
        self.table = nn.Parameter(torch.empty(*params.grid, d_model))
        self.cls = nn.Parameter(torch.empty(d_model))
        nn.init.trunc_normal_(self.table, std=0.02)
        nn.init.trunc_normal_(self.cls, std=0.02)

    def grid_table(self, grid: tuple[int, int]) -> Tensor:
        """The table resized to ``grid`` (bicubic, align_corners=False): ``(gh·gw, D)``.

        At the training grid this is the identity (the bicubic kernel at zero offset is 1)."""
        chw = self.table.permute(2, 0, 1).unsqueeze(0)  # (1, D, gh0, gw0)
        out = F.interpolate(chw, size=tuple(grid), mode="bicubic", align_corners=False)
        return out[0].permute(1, 2, 0).reshape(grid[0] * grid[1], -1)

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, state: dict | None = None) -> Tensor:
        """``state["grid"]`` (gh, gw), given by the ViT, spares reading the grid from the positions (a host sync)."""
        return x + self.grid_table(grid_shape(positions, (state or {}).get("grid"))).to(x.dtype)

    def cls_position(self) -> Tensor | None:
        return self.cls
