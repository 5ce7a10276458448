"""ALiBi: attention with linear biases (Press, Smith & Lewis 2022, "Train Short, Test Long").

Shape legend: B batch, H heads, Lq/Lk query/key length, Dh head width.

Each head h adds ``−m_h · |p_i − p_j|`` to its attention logits (§3, Fig. 3). In a causal
stack the mask removes j > i, so this equals the paper's causal ``−m_h · (i − j)``; in a
bidirectional stack it is the symmetric form. Distances come from the (float) positions tensor.
Slopes (§3): ``m_h = 2^(−8h/H)``, h = 1..H, for H a power of two; otherwise the slopes of the
closest power of two n < H followed by every other slope of 2n (the paper's public recipe).
No parameters: the fused SDPA path receives the bias as an additive float mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.positions.base import AttentionHook, AttentionPosition
from posenc.positions.registry import register


@dataclass
class AlibiParams:
    pass


def alibi_slopes(num_heads: int) -> list[float]:
    """Per-head slopes m_1..m_H (Press et al. 2022, §3)."""

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    n = 2 ** int(math.floor(math.log2(num_heads)))
    if n == num_heads:
        return power_of_two(n)
    return power_of_two(n) + power_of_two(2 * n)[0::2][: num_heads - n]


@dataclass
class AlibiContext:
    """``distance (B, 1, Lq, Lk)`` = |p_i − p_j|, shared by all layers of a stack."""

    distance: Tensor


class AlibiHook(AttentionHook):
    """Score term only: −m_h |p_i − p_j|, returned unscaled (× √Dh; the layer divides by √Dh)."""

    has_score, has_value = True, False

    def __init__(self, slopes: Tensor, head_dim: int) -> None:
        super().__init__()
        self.register_buffer("slopes", slopes, persistent=False)
        self.root = math.sqrt(head_dim)

    def bias(self, ctx: AlibiContext) -> Tensor:
        """→ ``(B, H, Lq, Lk)`` bias added to the *scaled* logits."""
        return -self.slopes[None, :, None, None] * ctx.distance

    def score(self, q: Tensor, ctx: AlibiContext) -> Tensor:
        return (self.bias(ctx) * self.root).to(q.dtype).expand(q.shape[0], -1, q.shape[2], -1)


@register("attention", "alibi", AlibiParams, augmentable_by=("randomized",))
class AlibiPosition(AttentionPosition):
    """One parameter-free hook, shared by every layer of the stack."""

    def __init__(self, d_model: int, params: AlibiParams, num_layers: int, num_heads: int, **_: Any) -> None:
        super().__init__()
        self.shared = AlibiHook(torch.tensor(alibi_slopes(num_heads)), d_model // num_heads)

    def context(self, q_positions: Tensor, k_positions: Tensor) -> AlibiContext:
        """Positions ``(B, Lq)``, ``(B, Lk)`` → |p_i − p_j| ``(B, 1, Lq, Lk)``."""
        return AlibiContext((q_positions[:, :, None] - k_positions[:, None, :]).abs().unsqueeze(1))

    def hook(self, layer: int) -> AlibiHook:
        return self.shared
