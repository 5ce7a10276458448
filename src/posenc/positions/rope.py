"""RoPE: rotary position embedding on queries and keys (Su et al. 2021, RoFormer, Eq. 34).

Shape legend: B batch, H heads, L length, Dh head width, P rotated pairs (P ≤ Dh/2).

For a real position p, each pair of dimensions (2j, 2j+1), j < P, of q and k is rotated by the
angle p·θ_j, θ_j = base'^(−2j/(2P)) (Eq. 15 with d = 2P), so q_m·k_n depends only on m − n
(Eq. 16). Positions are the float positions tensor, so CAPE and randomized positions compose
with it (SHAPE's global shift cancels in m − n: ``rope+shape`` is rejected). Options:

* ``fraction``: partial rotary, only the first 2P = 2·floor(fraction·Dh/2) dims are rotated,
  the others pass through;
* ``interpolation``: position interpolation (Chen et al. 2023), p ← p / interpolation
  (interpolation = target_len / train_len ≥ 1);
* ``ntk``: NTK-aware base scaling for inference beyond the training length,
  base' = base · ntk^(2P/(2P − 2)).

No parameters; the rotated q, k go to the fused SDPA path. Keys are rotated before they enter the
KV cache, each with its own position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.config import require
from posenc.positions.base import AttentionHook, AttentionPosition, PositionContext
from posenc.positions.registry import register


@dataclass
class RopeParams:
    base: float = 10000.0
    fraction: float = 1.0
    interpolation: float = 1.0
    ntk: float = 1.0

    def __post_init__(self) -> None:
        require(self.base > 1, f"rope.base must be > 1, got {self.base}")
        require(0 < self.fraction <= 1, f"rope.fraction must be in (0, 1], got {self.fraction}")
        require(self.interpolation >= 1 and self.ntk >= 1, "rope.interpolation and rope.ntk must be >= 1")


def rope_angles(positions: Tensor, pairs: int, params: RopeParams) -> Tensor:
    """Positions ``(B, L)`` → angles p·θ_j ``(B, 1, L, P)`` in float64."""
    base = params.base * params.ntk ** (2 * pairs / max(2 * pairs - 2, 1))
    theta = base ** (-torch.arange(pairs, dtype=torch.float64, device=positions.device) / pairs)
    return (positions.double() / params.interpolation)[:, None, :, None] * theta


def rotate(x: Tensor, angles: Tensor) -> Tensor:
    """Rotate pairs (2j, 2j+1) of ``x (B, H, L, Dh)`` by ``angles (B, 1, L, P)``; other dims kept."""
    pairs = angles.shape[-1]
    rot, rest = x[..., : 2 * pairs], x[..., 2 * pairs :]
    even, odd = rot[..., 0::2], rot[..., 1::2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    turned = torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)
    return torch.cat((turned, rest), -1)


@dataclass
class RopeContext(PositionContext):
    """Angles of the query ``(B, 1, Lq, P)`` and key ``(B, 1, Lk, P)`` positions."""

    q_angles: Tensor
    k_angles: Tensor


class RopeHook(AttentionHook[RopeContext]):
    """q/k transform only: no score or value term."""

    has_score, has_value, has_transform = False, False, True

    def transform_q(self, q: Tensor, ctx: RopeContext) -> Tensor:
        return rotate(q, ctx.q_angles)

    def transform_k(self, k: Tensor, ctx: RopeContext) -> Tensor:
        """New keys ``(B, H, Lnew, Dh)`` are the last Lnew key positions (KV cache)."""
        return rotate(k, ctx.k_angles[:, :, -k.shape[2] :])


# Not SHAPE: a shift of every position cancels in q_m·k_n (Eq. 16 depends on m − n only), so
# rope+shape would be a silent no-op and is rejected like alibi/t5/shaw+shape. CAPE's jitter and
# scaling and randomized positions change m − n.
@register("attention", "rope", RopeParams, augmentable_by=("cape", "randomized"))
class RotaryPosition(AttentionPosition[RopeContext]):
    def __init__(self, d_model: int, params: RopeParams, num_layers: int, num_heads: int, **_: Any) -> None:
        super().__init__()
        self.params, self.pairs = params, int(params.fraction * (d_model // num_heads) / 2)
        require(self.pairs >= 1, "rope.fraction rotates no dimension pair")
        self.shared = RopeHook()

    def context(self, q_positions: Tensor, k_positions: Tensor) -> RopeContext:
        return RopeContext(rope_angles(q_positions, self.pairs, self.params), rope_angles(k_positions, self.pairs, self.params))

    def hook(self, layer: int) -> RopeHook:
        return self.shared
