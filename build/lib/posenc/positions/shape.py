"""SHAPE: shifted absolute position embedding (Kiyono et al. 2021, §2.3, Eq. 2).

Training: PE(i + k) with k ~ U{0, …, K} drawn per sequence and per step, independently for the
source and the target. Inference: the paper sets k = 0 (its §2.3).

The public SHAPE code draws k from {0, …, K−1} and adds K at inference; ``inference_offset``
(default 0, the paper) lets both be compared, and ``exclusive_max`` draws from {0, …, K−1}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.config import require
from posenc.positions.base import Augmentation
from posenc.positions.registry import register


@dataclass
class ShapeParams:
    max_shift: int = 500
    inference_offset: int = 0
    exclusive_max: bool = False

    def __post_init__(self) -> None:
        require(self.max_shift >= 0, f"shape.max_shift (K) must be >= 0, got {self.max_shift}")
        require(self.inference_offset >= 0, f"shape.inference_offset must be >= 0, got {self.inference_offset}")
        require(not (self.exclusive_max and self.max_shift == 0), "shape.exclusive_max needs max_shift >= 1")


@register("augment", "shape", ShapeParams)
class ShapeAugmentation(Augmentation):
    def __init__(self, params: ShapeParams, **_: Any) -> None:
        super().__init__()
        self.params = params

    def sample_offsets(self, batch: int, device: torch.device) -> Tensor:
        """k per sequence, float ``(B, 1)``, uniform over {0..K} (or {0..K−1})."""
        high = self.params.max_shift + (0 if self.params.exclusive_max else 1)
        return torch.randint(0, high, (batch, 1), device=device).float()

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        if not self.training:
            return positions + self.params.inference_offset
        return positions + self.sample_offsets(positions.shape[0], positions.device)

    def pair(self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor) -> tuple[Tensor, Tensor]:
        # Independent draws for source and target (paper §2.3).
        return self.forward(src_pos, src_mask), self.forward(tgt_pos, tgt_mask)

    def eval_target(self, tgt_pos: Tensor) -> Tensor:
        return tgt_pos + self.params.inference_offset
