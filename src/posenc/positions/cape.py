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
    """Options of CAPE (each field's meaning in the ``#:`` comment above it)."""

    #: $\Delta_{\max} \ge 0$
    max_global_shift: float = 5.0
    #: $\epsilon_{\max} \ge 0$ (§5.3 MT: 0.5, which keeps token order)
    max_local_shift: float = 0.5
    #: $\lambda_{\max} \ge 1$; 1 disables scaling
    max_global_scaling: float = 1.0
    #: step (i) and its eval counterpart
    mean_normalize: bool = True
    #: $\alpha$ for translation (see below); 0: the translation task sets it from the corpus
    source_scale: float = 0.0
    #: prepend BOS to the source in translation (§5.3)
    source_bos: bool = True

    def __post_init__(self) -> None:
        for name in ("max_global_shift", "max_local_shift", "max_global_scaling", "source_scale"):
            value = getattr(self, name)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            require(ok, f"cape.{name} must be a finite number, got {value!r}")
        require(self.max_global_shift >= 0, f"cape.max_global_shift must be >= 0, got {self.max_global_shift}")
        require(self.max_local_shift >= 0, f"cape.max_local_shift must be >= 0, got {self.max_local_shift}")
        require(self.max_global_scaling >= 1,
                f"cape.max_global_scaling (λmax) must be >= 1, got {self.max_global_scaling}")
        require(self.source_scale >= 0, f"cape.source_scale (α) must be >= 0 (0 = auto), got {self.source_scale}")

    @property
    def needs_source_bos(self) -> bool:
        """Translation data must prepend BOS to the source (§5.3)."""
        return self.source_bos


def mean_normalize(positions: Tensor, mask: Tensor) -> Tensor:
    """Subtract each row's mean over real tokens (CAPE §4, step i).

    Args:
        positions: float positions ``(B, L)``.
        mask: ``(B, L)``, True at real tokens.

    Returns:
        The centred positions ``(B, L)``.
    """
    m = mask.to(positions.dtype)
    mean = (positions * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1)
    return positions - mean


def unit_uniform(batch: int, width: int, like: Tensor) -> Tensor:
    """U(−1, 1) samples: one on-device draw, no host sync.

    Args:
        batch: rows B.
        width: samples per row.
        like: a tensor whose device and dtype the samples take.

    Returns:
        The samples ``(B, width)``.
    """
    return torch.empty(batch, width, device=like.device, dtype=like.dtype).uniform_(-1.0, 1.0)


@register("augment", "cape", CapeParams,
          paper="Likhomanenko et al. 2021 (CAPE)",
          what="global shift, local jitter and global scaling of the positions in training")
class CapeAugmentation(Augmentation):
    """CAPE over 1-D positions: random shift, jitter and scaling in training, mean normalisation in eval.

    Args:
        params: the method's options.
    """

    def __init__(self, params: CapeParams, **_: Any) -> None:
        super().__init__()
        self.params = params

    def augment(self, sides: list[Tensor]) -> list[Tensor]:
        """Eq. 5-7 on sequences ``(B, L_j)`` of one batch that share Δ and λ (a pair, §5.3).

        One draw ``u ~ U(−1, 1)`` of shape ``(B, 2 + Σ L_j)`` gives, per row, Δ = Δmax·u₀ (Eq. 5),
        log λ = log(λmax)·u₁ (Eq. 7) and every ε_i = εmax·u_{2+i} (Eq. 6, independent per side);
        then p' = λ(p + Δ + ε) (shift, then scale: §4 order).

        Args:
            sides: float positions ``(B, L_j)`` of each sequence of the pair (or one sequence).

        Returns:
            The augmented positions of each side, same shapes, in the same order.
        """
        p = self.params
        lengths = [pos.shape[1] for pos in sides]
        u = unit_uniform(sides[0].shape[0], 2 + sum(lengths), sides[0])
        shift = u[:, :1] * p.max_global_shift  # (B, 1)
        scale = torch.exp(u[:, 1:2] * math.log(p.max_global_scaling))  # (B, 1)
        local = u[:, 2:].split(lengths, dim=1)  # (B, L_j) each
        return [(pos + shift).add_(eps, alpha=p.max_local_shift).mul_(scale) for pos, eps in zip(sides, local)]

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        """Mean-normalise (if set) and, in training, augment the positions of one sequence.

        Args:
            positions: float positions ``(B, L)``.
            mask: ``(B, L)``, True at real tokens (the mean is over those).

        Returns:
            The positions ``(B, L)``.
        """
        pos = mean_normalize(positions, mask) if self.params.mean_normalize else positions
        if not self.training:
            return pos
        return self.augment([pos])[0]

    def pair(self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Scale the source by α, mean-normalise it (if set) and, in training, augment both sides with
        one shared Δ and λ (§5.3).

        Args:
            src_pos: float source positions ``(B, Ls)``.
            src_mask: ``(B, Ls)``, True at real source tokens.
            tgt_pos: float target positions ``(B, Lt)``.
            tgt_mask: ``(B, Lt)`` (not read: the target is never mean-normalised).

        Returns:
            The source ``(B, Ls)`` and target ``(B, Lt)`` positions.
        """
        alpha = self.params.source_scale or 1.0
        src = src_pos * alpha if alpha != 1.0 else src_pos
        if self.params.mean_normalize:
            src = mean_normalize(src, src_mask)
        if not self.training:
            return src, tgt_pos
        src, tgt = self.augment([src, tgt_pos])  # one Δ and λ shared by the pair (§5.3)
        return src, tgt

    def eval_target(self, tgt_pos: Tensor, mask: Tensor | None = None) -> Tensor:
        """The inference transform of target positions: the identity (the target is not mean-normalised).

        Args:
            tgt_pos: float target positions ``(B, Lt)``.
            mask: ``(B, Lt)`` or None (not read).

        Returns:
            ``tgt_pos`` itself.
        """
        return tgt_pos
