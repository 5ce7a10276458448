"""Learned absolute position embeddings (one trained vector per integer position)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posenc.config import require
from posenc.errors import ConfigError, DataError
from posenc.positions.base import InputPosition
from posenc.positions.registry import register


@dataclass
class LearnedParams:
    """Options of the learned table (each field's meaning in the ``#:`` comment above it)."""

    #: table size $N$; positions must lie in $[0, N)$
    max_positions: int = 1024
    #: E(n mod N) instead of an error beyond the table (CAPE §5.2, long speech)
    wrap: bool = False

    def __post_init__(self) -> None:
        require(self.max_positions >= 1, f"learned.max_positions must be >= 1, got {self.max_positions}")

    @property
    def position_limit(self) -> int | None:
        """Positions must lie below this (None with ``wrap``): checked against augmentations at config time."""
        return None if self.wrap else self.max_positions


@register("input", "learned", LearnedParams, augmentable_by=("shape", "randomized", "abacus"),
          paper="Gehring et al. 2017", what="a learned table of absolute positions")
class LearnedPosition(InputPosition):
    """x + E[round(positions)]; positions must lie in [0, max_positions) unless ``wrap``.

    Args:
        d_model: model width D (the table's width).
        params: the method's options.
    """

    uses_positions = True
    integer_positions = True  # reads integer indices (a model measuring time in seconds gives frames)

    def __init__(self, d_model: int, params: LearnedParams, **_: Any) -> None:
        super().__init__()
        self.table = nn.Embedding(params.max_positions, d_model)
        self.wrap = params.wrap
        nn.init.normal_(self.table.weight, std=d_model**-0.5)

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, state: dict | None = None) -> Tensor:
        """Add the table row of each rounded position.

        Args:
            x: token embeddings ``(B, L, D)``.
            positions: float positions ``(B, L)``.
            mask: ``(B, L)``, True at real tokens (only theirs must lie in the table).
            state: incremental decoding's dict (not read).

        Returns:
            x + E[round(positions)], ``(B, L, D)``.

        Raises:
            DataError: a real token's position outside the table (without ``wrap``).
        """
        idx = positions.round().long()
        if self.wrap:
            idx = torch.remainder(idx, self.table.num_embeddings)
        self.check_range(idx, mask)
        return x + self.table(idx.clamp(0, self.table.num_embeddings - 1))

    def ct2_table(self, rows: int, offset: int) -> Tensor:
        """Rows ``offset …`` of the table, as many as it has, at most ``rows``.

        Args:
            rows: how many positions are asked for.
            offset: the first position.

        Returns:
            Float32 rows ``(≤ rows, D)``.

        Raises:
            ConfigError: ``offset`` lies beyond the table.
        """
        table = self.table.weight.detach()
        if offset >= table.shape[0]:
            raise ConfigError(f"learned position table has {table.shape[0]} rows, inference starts at {offset}")
        return table[offset : offset + rows].float()

    def check_range(self, idx: Tensor, mask: Tensor) -> None:
        """Refuse a real token's index outside the table. Eagerly a host read; in a compiled (captured)
        step a device-side assert instead, which raises where the device reports it, without a graph
        break or a host sync per step.

        Args:
            idx: long table indices ``(B, L)``.
            mask: ``(B, L)``, True at real tokens.

        Raises:
            DataError: (eagerly) a real token's index lies outside [0, max_positions).
        """
        size = self.table.num_embeddings
        if torch.compiler.is_compiling():
            torch._assert_async(((idx < size) | ~mask).all() & (idx >= 0).all(),
                                f"a position is outside the learned table [0, {size})")
            return
        hi = int(idx[mask].max()) if mask.any() else 0
        if hi >= size or int(idx.min()) < 0:
            raise DataError(
                f"position {hi} is outside the learned table [0, {size}); "
                "raise model.position.learned.max_positions or shorten the input"
            )
