"""ALiBi: attention with linear biases (Press, Smith & Lewis 2022, "Train Short, Test Long").

Shape legend: B batch, H heads, Lq/Lk query/key length, Dh head width.

Each head h adds ``−m_h · |p_i − p_j|`` to its attention logits (§3, Fig. 3). In a causal
stack the mask removes j > i, so this equals the paper's causal ``−m_h · (i − j)``. The paper
defines only the causal form; in a bidirectional stack ``|p_i − p_j|`` is exactly symmetric, so an
ALiBi-only encoder (no other position method) cannot tell a key at distance d on the left from one
on the right. ``asymmetric: true`` (bidirectional stacks only) follows Ruoss et al.'s reference code
and adds m_h/2 to the bias of keys on the left (p_j < p_i): ``−m_h · (|p_i − p_j| − ½·[p_j < p_i])``,
which breaks the tie. Distances come from the (float) positions tensor.
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

from posenc.config import require
from posenc.positions.base import AttentionHook, AttentionPosition, PositionContext
from posenc.positions.registry import register


@dataclass
class AlibiParams:
    """Options of ALiBi (each field's meaning in the ``#:`` comment above it)."""

    #: bidirectional stacks: $-m_h/2$ less penalty for keys left of the query (breaks the left/right symmetry);
    #: no effect in causal stacks
    asymmetric: bool = False

    def __post_init__(self) -> None:
        require(isinstance(self.asymmetric, bool), f"alibi.asymmetric must be true or false, got {self.asymmetric!r}")


def alibi_slopes(num_heads: int) -> list[float]:
    """Per-head slopes m_1..m_H (Press et al. 2022, §3).

    Args:
        num_heads: H, the number of attention heads.

    Returns:
        The H slopes, steepest first.
    """

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    n = 2 ** int(math.floor(math.log2(num_heads)))
    if n == num_heads:
        return power_of_two(n)
    return power_of_two(n) + power_of_two(2 * n)[0::2][: num_heads - n]


@dataclass
class AlibiContext(PositionContext):
    """The distances all layers of a stack read.

    Args:
        distance: |p_i − p_j| (less the left offset when asymmetric), ``(B, 1, Lq, Lk)``.
    """

    distance: Tensor


class AlibiHook(AttentionHook[AlibiContext]):
    """Bias only: −m_h |p_i − p_j| for the scaled logits (the attention interface's bias hook).

    Args:
        slopes: the per-head slopes ``(H,)`` (:func:`alibi_slopes`).
    """

    has_bias = True

    def __init__(self, slopes: Tensor) -> None:
        super().__init__()
        self.register_buffer("slopes", slopes, persistent=False)

    def bias(self, ctx: AlibiContext) -> Tensor:
        """The bias added to the *scaled* logits.

        Args:
            ctx: the stack's distances.

        Returns:
            −m_h · distance, ``(B, H, Lq, Lk)``.
        """
        return -self.slopes[None, :, None, None] * ctx.distance

@register("attention", "alibi", AlibiParams, augmentable_by=("randomized",),
          paper="Press et al. 2022", what="a linear distance penalty per head (causal or bidirectional)")
class AlibiPosition(AttentionPosition[AlibiContext]):
    """One parameter-free hook, shared by every layer of the stack.

    Args:
        d_model: model width (not read: ALiBi has no parameters).
        params: the method's options.
        num_layers: number of self-attention layers of the stack (they share one hook).
        num_heads: number of heads (one slope each).
        causal: the stack's self-attention is causal (the asymmetric option is then off).
    """

    ct2_refusal = "ALiBi bias, CTranslate2 has it for decoder-only models"

    def __init__(self, d_model: int, params: AlibiParams, num_layers: int, num_heads: int, causal: bool = False,
                 **_: Any) -> None:
        super().__init__()
        self.shared = AlibiHook(torch.tensor(alibi_slopes(num_heads)))
        self.left_offset = 0.5 if params.asymmetric and not causal else 0.0  # causal: the paper's form

    def context(self, q_positions: Tensor, k_positions: Tensor) -> AlibiContext:
        """The stack's distances.

        Args:
            q_positions: float query positions ``(B, Lq)``.
            k_positions: float key positions ``(B, Lk)``.

        Returns:
            |p_i − p_j| (− ½ for p_j < p_i if asymmetric), ``(B, 1, Lq, Lk)``.
        """
        diff = q_positions[:, :, None] - k_positions[:, None, :]
        distance = diff.abs()
        if self.left_offset:
            distance = distance - self.left_offset * (diff > 0).to(distance.dtype)
        return AlibiContext(distance.unsqueeze(1))

    def hook(self, layer: int) -> AlibiHook:
        """The hook every layer shares.

        Args:
            layer: the layer index (not read).

        Returns:
            The shared hook.
        """
        return self.shared
