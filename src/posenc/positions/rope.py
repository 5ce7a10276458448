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
  base' = base · ntk^(2P/(2P − 2));
* ``scaling``: per-frequency context extension, θ_j and an attention factor a (both rotated q and k
  are multiplied by a, so the logits by a²), as Hugging Face's ``modeling_rope_utils`` computes them:
  ``yarn`` (Peng et al. 2023, YaRN: NTK-by-parts ramp between β_fast and β_slow rotations over the
  original length, a = 0.1·ln s + 1), ``longrope`` (Ding et al. 2024: static per-frequency factors,
  θ_j = base^(−j/P)/λ_j with λ the long factors when ``target_length`` exceeds the original length,
  else the short ones; a = sqrt(1 + ln s / ln L)), ``llama3`` (Meta 2024: wavelengths above
  L/low_freq_factor divided by s, below L/high_freq_factor kept, smooth interpolation between).
  ``none`` (the default) is the plain RoPE above.

No parameters; the rotated q, k go to the fused SDPA path. Keys are rotated before they enter the
KV cache, each with its own position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor

from posenc.config import require
from posenc.positions.base import AttentionHook, AttentionPosition, PositionContext
from posenc.positions.registry import register

Device = torch.device | str


@dataclass
class RopeParams:
    """Options of RoPE (each field's meaning in the ``#:`` comment above it)."""

    #: $b$
    base: float = 10000.0
    #: partial rotary: $P = \lfloor \text{fraction} \cdot D_h / 2 \rfloor$, other dims untouched
    fraction: float = 1.0
    #: position interpolation (Chen et al. 2023): $p \leftarrow p / s$, $s$ = target/train length
    interpolation: float = 1.0
    #: NTK-aware scaling: $b' = b \cdot \text{ntk}^{2P/(2P-2)}$
    ntk: float = 1.0
    #: per-frequency context extension: `yarn`, `longrope`, `llama3` (below); `none` is plain RoPE
    scaling: str = "none"
    #: $s$ = target length / training length
    factor: float = 1.0
    #: $L$, the training length (required by every `scaling`)
    original_max_position: int = 0
    #: $a$; 0 takes the scaling's own
    attention_factor: float = 0.0
    #: YaRN: rotations over $L$ above which a pair keeps $\theta_j$ (the ramp's fast end)
    beta_fast: float = 32.0
    #: YaRN: rotations over $L$ below which a pair gets $\theta_j/s$ (the ramp's slow end)
    beta_slow: float = 1.0
    #: YaRN: round the ramp's ends outward (floor/ceil), as Hugging Face's default
    yarn_truncate: bool = True
    #: Llama 3: wavelengths above $L/\text{low\_freq\_factor}$ are interpolated fully
    low_freq_factor: float = 1.0
    #: Llama 3: wavelengths below $L/\text{high\_freq\_factor}$ are kept; smooth in between
    high_freq_factor: float = 4.0
    #: LongRoPE: per-pair factors $\lambda_j$ used within $L$ (one per rotated pair)
    short_factor: list[float] = field(default_factory=list)
    #: LongRoPE: per-pair factors $\lambda_j$ used beyond $L$ (one per rotated pair)
    long_factor: list[float] = field(default_factory=list)
    #: LongRoPE: the long factors are used when this exceeds $L$ (Hugging Face's `seq_len`, fixed once so the KV
    #: cache stays valid)
    target_length: int = 0

    def __post_init__(self) -> None:
        require(self.base > 1, f"rope.base must be > 1, got {self.base}")
        require(0 < self.fraction <= 1, f"rope.fraction must be in (0, 1], got {self.fraction}")
        require(self.interpolation >= 1 and self.ntk >= 1, "rope.interpolation and rope.ntk must be >= 1")
        require(self.scaling in SCALINGS, f"rope.scaling {self.scaling!r} unknown (known: {', '.join(SCALINGS)})")
        if self.scaling == "none":
            return
        require(self.interpolation == 1 and self.ntk == 1,
                f"rope.scaling={self.scaling} replaces rope.interpolation and rope.ntk (leave them 1)")
        require(self.original_max_position >= 1,
                f"rope.scaling={self.scaling} needs rope.original_max_position (the training length) >= 1")
        require(self.factor >= 1 and self.attention_factor >= 0,
                "rope.factor must be >= 1 and rope.attention_factor >= 0")
        require(self.high_freq_factor > self.low_freq_factor > 0,
                "rope.high_freq_factor must exceed rope.low_freq_factor > 0")
        require(self.scaling != "longrope" or (bool(self.short_factor) and bool(self.long_factor)),
                "rope.scaling=longrope needs rope.short_factor and rope.long_factor (one factor per rotated pair)")


def ntk_base(pairs: int, p: RopeParams) -> float:
    """base' = base · ntk^(2P/(2P − 2)), the NTK-aware base (``base`` itself at ntk = 1).

    Args:
        pairs: P, the rotated pairs.
        p: the options (``base``, ``ntk``).

    Returns:
        The base b'.
    """
    return p.base * p.ntk ** (2 * pairs / max(2 * pairs - 2, 1))


def _plain(pairs: int, p: RopeParams, device: Device = "cpu") -> tuple[Tensor, float]:
    """θ_j = base'^(−j/P) (RoFormer Eq. 15 with the NTK-aware base :func:`ntk_base`)."""
    return ntk_base(pairs, p) ** (-torch.arange(pairs, dtype=torch.float64, device=device) / pairs), 1.0


def _yarn(pairs: int, p: RopeParams, device: Device = "cpu") -> tuple[Tensor, float]:
    """YaRN (Peng et al. 2023, Eq. 18-20 "NTK-by-parts" and §3.4): frequency j is interpolated
    (θ_j/s) when it turns fewer than β_slow times over L, kept when more than β_fast, linear between."""
    theta, dim = _plain(pairs, p, device)[0], 2 * pairs

    def dim_of(rotations: float) -> float:  # the pair index that turns `rotations` times over L
        return dim * math.log(p.original_max_position / (rotations * 2 * math.pi)) / (2 * math.log(p.base))

    low, high = dim_of(p.beta_fast), dim_of(p.beta_slow)
    if p.yarn_truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = ((torch.arange(pairs, dtype=torch.float64, device=device) - low) / ((high - low) or 0.001)).clamp(0, 1)
    factor = p.attention_factor or (0.1 * math.log(p.factor) + 1.0 if p.factor > 1 else 1.0)
    return theta / p.factor * ramp + theta * (1 - ramp), factor


def _longrope(pairs: int, p: RopeParams, device: Device = "cpu") -> tuple[Tensor, float]:
    """LongRoPE (Ding et al. 2024), static: θ_j = base^(−j/P) / λ_j with the long factors beyond L."""
    factors = p.long_factor if p.target_length > p.original_max_position else p.short_factor
    require(len(factors) == pairs,
            f"rope.short_factor/long_factor need {pairs} factors (one per rotated pair), got {len(factors)}")
    scale = math.sqrt(1 + math.log(p.factor) / math.log(p.original_max_position)) if p.factor > 1 else 1.0
    return (_plain(pairs, p, device)[0] / torch.tensor(factors, dtype=torch.float64, device=device),
            p.attention_factor or scale)


def _llama3(pairs: int, p: RopeParams, device: Device = "cpu") -> tuple[Tensor, float]:
    """Llama 3.1 (Meta 2024): wavelength λ_j = 2π/θ_j; λ > L/low → θ/s, λ < L/high → θ, else
    (1 − γ)·θ/s + γ·θ with γ = (L/λ − low)/(high − low)."""
    theta = _plain(pairs, p, device)[0]
    wavelength = 2 * math.pi / theta
    gamma = (p.original_max_position / wavelength - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor)
    smooth = (1 - gamma) * theta / p.factor + gamma * theta
    out = torch.where(wavelength > p.original_max_position / p.low_freq_factor, theta / p.factor, theta)
    medium = ((wavelength >= p.original_max_position / p.high_freq_factor)
              & (wavelength <= p.original_max_position / p.low_freq_factor))
    return torch.where(medium, smooth, out), p.attention_factor or 1.0


#: ``rope.scaling`` name → (pairs, params, device) → (θ ``(P,)`` float64, attention factor).
SCALINGS: dict[str, Callable[[int, RopeParams, Device], tuple[Tensor, float]]] = {
    "none": _plain, "yarn": _yarn, "longrope": _longrope, "llama3": _llama3,
}


def inverse_frequencies(pairs: int, params: RopeParams, device: Device = "cpu") -> tuple[Tensor, float]:
    """The rotation frequencies and attention factor of ``params``' ``scaling``.

    Args:
        pairs: P, the rotated pairs.
        params: the options.
        device: where θ is computed.

    Returns:
        θ_j ``(P,)`` float64 on ``device``, and the attention factor a (1 without scaling).

    Raises:
        ConfigError: LongRoPE factors whose count is not P.
    """
    return SCALINGS[params.scaling](pairs, params, device)


def rope_angles(positions: Tensor, pairs: int, params: RopeParams) -> Tensor:
    """The rotation angles p·θ_j of each position (θ computed on the positions' device).

    Args:
        positions: float positions ``(B, L)``.
        pairs: P, the rotated pairs.
        params: the options (frequencies, interpolation).

    Returns:
        Float64 angles ``(B, 1, L, P)``.
    """
    theta = inverse_frequencies(pairs, params, positions.device)[0]
    return (positions.double() / params.interpolation)[:, None, :, None] * theta


def rotate(x: Tensor, angles: Tensor, scale: float | Tensor = 1.0) -> Tensor:
    """Rotate the pairs (2j, 2j+1), j < P, of ``x`` and multiply them by ``scale``; other dims kept.

    Args:
        x: queries or keys ``(B, H, L, Dh)``.
        angles: rotation angles ``(B, 1, L, P)``.
        scale: a float, or a tensor per pair and position broadcastable to the angles (xPos).

    Returns:
        The rotated tensor ``(B, H, L, Dh)``, in ``x``'s dtype.
    """
    pairs = angles.shape[-1]
    rot, rest = x[..., : 2 * pairs], x[..., 2 * pairs :]
    even, odd = rot[..., 0::2], rot[..., 1::2]
    cos, sin = angles.cos(), angles.sin()
    if not (isinstance(scale, float) and scale == 1.0):  # the attention factor (YaRN, LongRoPE), xPos
        cos, sin = cos * scale, sin * scale
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    turned = torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)
    return torch.cat((turned, rest), -1)


@dataclass
class RopeContext(PositionContext):
    """What the hooks of a stack read.

    Args:
        q_angles: angles of the query positions ``(B, 1, Lq, P)``.
        k_angles: angles of the key positions ``(B, 1, Lk, P)``.
        scale: the attention factor that multiplies the rotated q and k (1 without scaling).
    """

    q_angles: Tensor
    k_angles: Tensor
    scale: float = 1.0


class RopeHook(AttentionHook[RopeContext]):
    """q/k transform only: no score or value term."""

    has_transform = True

    def transform_q(self, q: Tensor, ctx: RopeContext) -> Tensor:
        """Rotate the queries by their angles (times the attention factor).

        Args:
            q: queries ``(B, H, Lq, Dh)``.
            ctx: the stack's angles.

        Returns:
            The rotated queries ``(B, H, Lq, Dh)``.
        """
        return rotate(q, ctx.q_angles, ctx.scale)

    def transform_k(self, k: Tensor, ctx: RopeContext) -> Tensor:
        """Rotate the new keys by the angles of the last Lnew key positions (KV cache).

        Args:
            k: new keys ``(B, H, Lnew, Dh)``.
            ctx: the stack's angles.

        Returns:
            The rotated keys ``(B, H, Lnew, Dh)``.
        """
        return rotate(k, ctx.k_angles[:, :, -k.shape[2] :], ctx.scale)


# Not SHAPE: a shift of every position cancels in q_m·k_n (Eq. 16 depends on m − n only), so
# rope+shape would be a silent no-op and is rejected like alibi/t5/shaw+shape. CAPE's jitter and
# scaling and randomized positions change m − n.
@register("attention", "rope", RopeParams, augmentable_by=("cape", "randomized"),
          paper="Su et al. 2021 (RoFormer)",
          what="rotary q/k (partial rotary, PI, NTK, YaRN, LongRoPE, Llama-3 scaling)")
class RotaryPosition(AttentionPosition[RopeContext]):
    """RoPE: one parameter-free hook, shared by every layer.

    Args:
        d_model: model width D.
        params: the method's options.
        num_layers: self-attention layers of the stack (they share one hook).
        num_heads: heads (the head width is D / num_heads).

    Raises:
        ConfigError: ``fraction`` rotates no pair, or LongRoPE factors whose count is not P.
    """

    def __init__(self, d_model: int, params: RopeParams, num_layers: int, num_heads: int, **_: Any) -> None:
        super().__init__()
        self.params, self.pairs = params, int(params.fraction * (d_model // num_heads) / 2)
        require(self.pairs >= 1, "rope.fraction rotates no dimension pair")
        self.scale = inverse_frequencies(self.pairs, params)[1]  # also checks the factors' count, here
        self.shared = RopeHook()
        if params.scaling != "none" or params.interpolation != 1:
            self.ct2_refusal = (f"scaling {params.scaling!r} / interpolation {params.interpolation}: only plain RoPE, "
                                "partial rotary and the NTK base have a checked CTranslate2 form")

    def context(self, q_positions: Tensor, k_positions: Tensor) -> RopeContext:
        """The stack's angles.

        Args:
            q_positions: float query positions ``(B, Lq)``.
            k_positions: float key positions ``(B, Lk)``.

        Returns:
            Query and key angles and the attention factor.
        """
        q, k = (rope_angles(p, self.pairs, self.params) for p in (q_positions, k_positions))
        return RopeContext(q, k, self.scale)

    def hook(self, layer: int) -> RopeHook:
        """The hook every layer shares.

        Args:
            layer: the layer index (not read).

        Returns:
            The shared hook.
        """
        return self.shared

    def ct2_spec(self) -> dict[str, Any]:
        """CTranslate2's interleaved rotary embeddings: pairs (2j, 2j+1) as here (Eq. 34).

        Returns:
            ``rotary_dim`` 2P, ``rotary_interleave`` True and ``rotary_base`` the NTK-scaled base b'.
        """
        base = ntk_base(self.pairs, self.params)
        return {"rotary_dim": 2 * self.pairs, "rotary_interleave": True, "rotary_base": base}
