"""CAPE: continuous augmented positional embeddings (Likhomanenko et al. 2021, §4, §5.3).

Training, in order (§4): (i) mean normalisation over real tokens, (ii) global shift
Δ ~ U(−Δmax, Δmax) (Eq. 5), (iii) local shift ε_i ~ U(−εmax, εmax) (Eq. 6), (iv) global scaling
p ← λp with log λ ~ U(−log λmax, log λmax) (Eq. 7). Eval: mean normalisation only.

Translation (§5.3): source positions are multiplied by α = #target tokens / #source tokens of the
corpus (``source_scale``); one global shift and scale is shared by the source and target of a
pair, local shifts are independent. Deviation: the target side is never mean-normalised, since
during incremental decoding the target length (and so its mean) is unknown; set
``mean_normalize: false`` (as the shipped translation configs do) to treat both sides alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.config import require
from posenc.positions.base import Augmentation
from posenc.positions.registry import register


@dataclass
class CapeParams:
    max_global_shift: float = 5.0
    max_local_shift: float = 0.5
    max_global_scaling: float = 1.0
    mean_normalize: bool = True
    source_scale: float = 0.0  # α; 0 = auto: the translation pipeline sets it from the corpus
    source_bos: bool = True  # prepend BOS to the source in translation (§5.3)

    def __post_init__(self) -> None:
        require(self.max_global_shift >= 0, f"cape.max_global_shift must be >= 0, got {self.max_global_shift}")
        require(self.max_local_shift >= 0, f"cape.max_local_shift must be >= 0, got {self.max_local_shift}")
        require(self.max_global_scaling >= 1, f"cape.max_global_scaling (λmax) must be >= 1, got {self.max_global_scaling}")
        require(self.source_scale >= 0, f"cape.source_scale (α) must be >= 0 (0 = auto), got {self.source_scale}")

    @property
    def needs_source_bos(self) -> bool:
        """Translation data must prepend BOS to the source (§5.3)."""
        return self.source_bos

    @property
    def needs_corpus_alpha(self) -> bool:
        """α must be filled from the corpus (#target / #source tokens) before building."""
        return self.source_scale == 0.0


def mean_normalize(positions: Tensor, mask: Tensor) -> Tensor:
    """Subtract each row's mean over real tokens: ``(B, L)`` → ``(B, L)``."""
    m = mask.to(positions.dtype)
    mean = (positions * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1)
    return positions - mean


def uniform(shape: tuple[int, ...], bound: float, like: Tensor) -> Tensor:
    """U(−bound, bound) samples of ``shape`` on ``like``'s device/dtype."""
    return (torch.rand(shape, device=like.device, dtype=like.dtype) * 2 - 1) * bound


@register("augment", "cape", CapeParams)
class CapeAugmentation(Augmentation):
    def __init__(self, params: CapeParams, **_: Any) -> None:
        super().__init__()
        self.params = params

    def draw_global(self, batch: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """(Δ, λ) per sequence, each ``(B, 1)``."""
        p = self.params
        shift = uniform((batch, 1), p.max_global_shift, like)
        scale = torch.exp(uniform((batch, 1), math.log(p.max_global_scaling), like))
        return shift, scale

    def _augment(self, pos: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
        local = uniform(tuple(pos.shape), self.params.max_local_shift, pos)
        return (pos + shift + local) * scale

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        pos = mean_normalize(positions, mask) if self.params.mean_normalize else positions
        if not self.training:
            return pos
        return self._augment(pos, *self.draw_global(pos.shape[0], pos))

    def pair(self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor) -> tuple[Tensor, Tensor]:
        src = src_pos * (self.params.source_scale or 1.0)
        if self.params.mean_normalize:
            src = mean_normalize(src, src_mask)
        if not self.training:
            return src, tgt_pos
        shift, scale = self.draw_global(src.shape[0], src)  # shared by the pair (§5.3)
        return self._augment(src, shift, scale), self._augment(tgt_pos, shift, scale)

    def eval_target(self, tgt_pos: Tensor) -> Tensor:
        return tgt_pos
