"""xPos: RoPE with per-dimension exponential decay (Sun et al. 2022, "A Length-Extrapolatable
Transformer", §3.2, Eq. 7-9).

Shape legend: B batch, H heads, L length, Dh head width, P = Dh/2 rotated pairs.

Each pair (2j, 2j+1) of q at position n is rotated by n·θ_j (RoPE, θ_j = base^(−j/P)) and scaled
by ζ_j^(n/γ); of k at position m, rotated by m·θ_j and scaled by ζ_j^(−m/γ), with

    ζ_j = (2j + 0.4·Dh) / (1.4·Dh),  j = 0 … P−1,   γ = scale_base = 512,

so q_n·k_m = Σ_j ζ_j^((n−m)/γ) · (RoPE's pair-j product): ζ_j < 1 makes attention decay with the
distance n − m ≥ 0, fastest for the low pairs (high frequencies). The decay only makes sense for
n ≥ m, so xPos is causal only (a bidirectional stack is refused). The reference code centres the
exponents on the sequence (a numerical device that cancels in q·k); here they are the absolute
positions, so cached keys keep their scale (KV cache), and the scales stay in range while
ζ_0^(−n/γ) = 3.5^(n/512) does (n ≲ 10⁴ in float32). No parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.config import require
from posenc.positions.base import AttentionHook, AttentionPosition, PositionContext
from posenc.positions.registry import register
from posenc.positions.rope import RopeParams, rope_angles, rotate


@dataclass
class XposParams:
    """Options of xPos (each field's meaning in the ``#:`` comment above it)."""

    #: RoPE's base $b$
    base: float = 10000.0
    #: $\gamma$
    scale_base: float = 512.0
    #: $\zeta_j = (2j/D_h + \text{gamma})/(1 + \text{gamma})$
    gamma: float = 0.4

    def __post_init__(self) -> None:
        require(self.base > 1, f"xpos.base must be > 1, got {self.base}")
        require(self.scale_base > 0 and self.gamma > 0, "xpos.scale_base and xpos.gamma must be > 0")


def xpos_zeta(pairs: int, gamma: float = 0.4) -> Tensor:
    """The per-pair decay bases ζ_j = (2j + γ'·d)/((1 + γ')·d), d = 2P (Sun et al. 2022, §3.2).

    Args:
        pairs: P, the rotated pairs.
        gamma: γ'.

    Returns:
        ζ ``(P,)``, float64.
    """
    d = 2 * pairs
    return (2 * torch.arange(pairs, dtype=torch.float64) + gamma * d) / ((1 + gamma) * d)


@dataclass
class XposContext(PositionContext):
    """What the hooks of a stack read: RoPE angles and the scales ζ^(±p/γ), float64.

    Args:
        q_angles: angles of the query positions ``(B, 1, Lq, P)``.
        k_angles: angles of the key positions ``(B, 1, Lk, P)``.
        q_scale: ζ^(n/γ) of the query positions ``(B, 1, Lq, P)``.
        k_scale: ζ^(−m/γ) of the key positions ``(B, 1, Lk, P)``.
    """

    q_angles: Tensor
    k_angles: Tensor
    q_scale: Tensor
    k_scale: Tensor


class XposHook(AttentionHook[XposContext]):
    """q/k transform only: rotate and scale (q by ζ^(n/γ), new keys by ζ^(−m/γ))."""

    has_transform = True

    def transform_q(self, q: Tensor, ctx: XposContext) -> Tensor:
        """Rotate the queries and scale them by ζ^(n/γ).

        Args:
            q: queries ``(B, H, Lq, Dh)``.
            ctx: the stack's angles and scales.

        Returns:
            The transformed queries ``(B, H, Lq, Dh)``.
        """
        return rotate(q, ctx.q_angles, ctx.q_scale)

    def transform_k(self, k: Tensor, ctx: XposContext) -> Tensor:
        """Rotate the new keys and scale them by ζ^(−m/γ), at the last Lnew key positions (KV cache).

        Args:
            k: new keys ``(B, H, Lnew, Dh)``.
            ctx: the stack's angles and scales.

        Returns:
            The transformed keys ``(B, H, Lnew, Dh)``.
        """
        n = k.shape[2]
        return rotate(k, ctx.k_angles[:, :, -n:], ctx.k_scale[:, :, -n:])


@register("attention", "xpos", XposParams, augmentable_by=("randomized",), causal_only=True,
          paper="Sun et al. 2022", what="RoPE with an exponential decay per rotated pair")
class XposPosition(AttentionPosition[XposContext]):
    """xPos: one parameter-free hook, shared by every layer.

    Args:
        d_model: model width D.
        params: the method's options.
        num_layers: self-attention layers of the stack (they share one hook).
        num_heads: heads (P = head width / 2).
        causal: must be True.

    Raises:
        ConfigError: in a bidirectional stack, or a head width below 2.
    """

    ct2_refusal = "rotary q/k scaled per position; CTranslate2's rotary embeddings have no scale"

    def __init__(self, d_model: int, params: XposParams, num_layers: int, num_heads: int, causal: bool = False,
                 **_: Any) -> None:
        super().__init__()
        require(causal,
                "xpos is causal only (Sun et al. 2022: the decay needs n >= m); use rope in a bidirectional stack")
        self.params, self.pairs = params, (d_model // num_heads) // 2
        require(self.pairs >= 1, "xpos needs a head width >= 2")
        self.rope = RopeParams(base=params.base)
        self.log_zeta = xpos_zeta(self.pairs, params.gamma).log()
        self.shared = XposHook()

    def context(self, q_positions: Tensor, k_positions: Tensor) -> XposContext:
        """The stack's angles and scales exp(±p/γ · ln ζ_j), float64.

        Args:
            q_positions: float query positions ``(B, Lq)``.
            k_positions: float key positions ``(B, Lk)``.

        Returns:
            The context.
        """
        log_zeta = self.log_zeta.to(q_positions.device)

        def scale(positions: Tensor, sign: float) -> Tensor:
            return torch.exp(sign * positions.double()[:, None, :, None] / self.params.scale_base * log_zeta)

        return XposContext(rope_angles(q_positions, self.pairs, self.rope),
                           rope_angles(k_positions, self.pairs, self.rope),
                           scale(q_positions, 1.0), scale(k_positions, -1.0))

    def hook(self, layer: int) -> XposHook:
        """The hook every layer shares.

        Args:
            layer: the layer index (not read).

        Returns:
            The shared hook.
        """
        return self.shared
