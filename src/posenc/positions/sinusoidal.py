"""Absolute sinusoidal positions for real-valued positions (SHAPE Eq. 1; CAPE Eq. 1 and §3 audio).

PE(p, 2j) = sin(p·ω_j), PE(p, 2j+1) = cos(p·ω_j), ω_j = scale · base^(−2j/D)   (Vaswani et al.)

SHAPE's Eq. 1 writes the exponent as 2m/D with m the dimension index; we use the standard
2⌊m/2⌋/D (pairs of sin/cos share a frequency), as Vaswani et al. and OpenNMT-py do. ``scale``
is 1 for text; CAPE uses ω_k = 30·10000^(−2k/K) for audio with positions in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.config import require
from posenc.positions.base import InputPosition
from posenc.positions.registry import register


@dataclass
class SinusoidalParams:
    """Options of the sinusoid (each field's meaning in the ``#:`` comment above it)."""

    #: base of the geometric frequency progression (> 1)
    base: float = 10000.0
    #: multiplies every frequency; CAPE uses 30 for audio with positions in seconds
    scale: float = 1.0

    def __post_init__(self) -> None:
        require(self.base > 1.0, f"sinusoidal.base must be > 1, got {self.base}")
        require(self.scale > 0.0, f"sinusoidal.scale must be > 0, got {self.scale}")


def frequencies(dim: int, base: float = 10000.0, scale: float = 1.0) -> Tensor:
    """The frequencies ω_j = scale · base^(−2j/dim), j = 0..dim/2−1.

    Args:
        dim: embedding width, even.
        base: base of the geometric progression.
        scale: multiplies every frequency.

    Returns:
        ω, float64 ``(dim/2,)``.

    Raises:
        ValueError: an odd width.
    """
    if dim % 2:
        raise ValueError(f"sinusoidal embeddings need an even width, got {dim}")
    j = torch.arange(dim // 2, dtype=torch.float64)
    return scale * base ** (-2.0 * j / dim)


def sinusoidal_embedding(positions: Tensor, dim: int, base: float = 10000.0, scale: float = 1.0) -> Tensor:
    """Sinusoidal embeddings of real positions: sin at even, cos at odd indices.

    Args:
        positions: real positions, any shape ``(...)``.
        dim: embedding width, even.
        base: base of the geometric progression.
        scale: multiplies every frequency.

    Returns:
        Float32 embeddings ``(..., dim)``.
    """
    omega = frequencies(dim, base, scale).to(positions.device)
    angles = positions.to(torch.float64).unsqueeze(-1) * omega  # (..., dim/2)
    out = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    return out.to(torch.float32)


@register("input", "sinusoidal", SinusoidalParams, augmentable_by=("shape", "cape", "randomized"),
          paper="Vaswani et al. 2017", what="fixed sinusoidal absolute positions added to the embeddings (APE)")
class SinusoidalPosition(InputPosition):
    """x + PE(positions). Positions may be fractional (CAPE) or shifted (SHAPE).

    Args:
        d_model: model width D, even.
        params: the method's options.
    """

    uses_positions = True

    def __init__(self, d_model: int, params: SinusoidalParams, **_: Any) -> None:
        super().__init__()
        self.d_model = d_model
        self.params = params
        self.register_buffer("omega", frequencies(d_model, params.base, params.scale), persistent=False)

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, state: dict | None = None) -> Tensor:
        """Add PE(positions), computed from float64 angles.

        Args:
            x: token embeddings ``(B, L, D)``.
            positions: float positions ``(B, L)`` (a row broadcast to all rows is computed once).
            mask: ``(B, L)`` (not read).
            state: incremental decoding's dict (not read).

        Returns:
            x + PE(positions), ``(B, L, D)``.
        """
        # float64 angles: positions up to ~1e4 keep full float32 precision in sin/cos.
        if positions.dim() > 1 and positions.shape[0] > 1 and positions.stride(0) == 0:
            positions = positions[:1]  # one row broadcast to all (default_positions): its PE once, broadcast in the sum
        angles = positions.to(torch.float64).unsqueeze(-1) * self.omega
        pe = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
        return x + pe.to(x.dtype)

    def ct2_table(self, rows: int, offset: int) -> Tensor:
        """The interleaved sinusoid (PE(p, 2j) = sin, PE(p, 2j+1) = cos).

        Args:
            rows: how many positions.
            offset: the first position.

        Returns:
            Float32 table ``(rows, D)`` of positions ``offset … offset+rows−1``.
        """
        positions = torch.arange(offset, offset + rows, dtype=torch.float64)
        return sinusoidal_embedding(positions, self.d_model, self.params.base, self.params.scale)
