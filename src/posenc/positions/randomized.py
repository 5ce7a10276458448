"""Randomized positional encodings (Ruoss et al. 2023, ACL, §3).

Training: the positions of a length-L sequence are a sorted random subset of {0, …, N−1}
(N = ``max_len`` ≥ L), drawn per sequence and per step (source and target independently).
Evaluation: positions 0, …, L−1 (identity). Real tokens are a right-padded prefix, so their
positions are sorted and distinct too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.config import require
from posenc.errors import DataError
from posenc.positions.base import Augmentation
from posenc.positions.registry import register


@dataclass
class RandomizedParams:
    max_len: int = 2048

    def __post_init__(self) -> None:
        require(self.max_len >= 1, f"randomized.max_len must be >= 1, got {self.max_len}")


@register("augment", "randomized", RandomizedParams)
class RandomizedAugmentation(Augmentation):
    def __init__(self, params: RandomizedParams, **_: Any) -> None:
        super().__init__()
        self.params = params

    def sample(self, batch: int, length: int, device: torch.device) -> Tensor:
        """Sorted distinct positions ``(B, L)`` drawn uniformly from {0..N−1}, as float."""
        n = self.params.max_len
        if length > n:
            raise DataError(f"sequence length {length} exceeds randomized.max_len {n}")
        chosen = torch.rand(batch, n, device=device).argsort(-1)[:, :length]
        return chosen.sort(-1).values.float()

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        if not self.training:
            return positions
        return self.sample(positions.shape[0], positions.shape[1], positions.device)

    def pair(self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor) -> tuple[Tensor, Tensor]:
        return self.forward(src_pos, src_mask), self.forward(tgt_pos, tgt_mask)

    def eval_target(self, tgt_pos: Tensor) -> Tensor:
        return tgt_pos
