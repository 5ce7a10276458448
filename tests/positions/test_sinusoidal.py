"""Sinusoidal table against the closed form (Vaswani et al.; SHAPE Eq. 1; CAPE Eq. 1 and §3 audio)."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.positions.base import default_positions
from posenc.positions.sinusoidal import SinusoidalParams, SinusoidalPosition, sinusoidal_embedding


def closed_form(p: float, m: int, dim: int, base: float = 10000.0, scale: float = 1.0) -> float:
    """PE(p, 2j) = sin(p·ω_j), PE(p, 2j+1) = cos(p·ω_j), ω_j = scale / base^(2j/D), with Python math."""
    j = m // 2
    angle = p * scale / base ** (2 * j / dim)
    return math.sin(angle) if m % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("dim", [8, 512])
@pytest.mark.parametrize("p", [0, 1, 7, 49, 500, 4321])
def test_integer_positions_match_closed_form(dim: int, p: int) -> None:
    table = sinusoidal_embedding(torch.tensor([float(p)]), dim)[0]
    assert table.shape == (dim,) and table.dtype == torch.float32
    for m in sorted({0, 1, 2, 3, dim // 2, dim // 2 + 1, dim - 2, dim - 1}):
        assert table[m].item() == pytest.approx(closed_form(p, m, dim), abs=1e-6)


@pytest.mark.parametrize("p", [0.5, 2.25, -1.75, 13.125, -250.5])
def test_fractional_and_negative_positions(p: float) -> None:
    """CAPE feeds real-valued (and, after mean normalisation, negative) positions."""
    dim = 16
    table = sinusoidal_embedding(torch.tensor([[p]]), dim)[0, 0]
    expected = torch.tensor([closed_form(p, m, dim) for m in range(dim)])
    torch.testing.assert_close(table, expected.float(), atol=1e-6, rtol=0)


def test_scale_and_base_for_audio() -> None:
    """CAPE §3 (sound): ω_k = 30 · 10000^(−2k/K), positions in seconds."""
    dim, t = 12, 0.37
    table = sinusoidal_embedding(torch.tensor([t]), dim, base=10000.0, scale=30.0)[0]
    expected = [closed_form(t, m, dim, scale=30.0) for m in range(dim)]
    assert table.tolist() == pytest.approx(expected, abs=1e-6)
    other = sinusoidal_embedding(torch.tensor([5.0]), dim, base=100.0)[0]
    assert other.tolist() == pytest.approx([closed_form(5.0, m, dim, base=100.0) for m in range(dim)], abs=1e-6)


def test_relative_shift_is_a_rotation() -> None:
    """CAPE Eq. 2: E(n + m) = S^m E(n) — each (sin, cos) pair rotates by m·ω_j."""
    dim, n, m = 10, 3.0, 4.5
    a = sinusoidal_embedding(torch.tensor([n]), dim)[0].double().view(-1, 2)
    b = sinusoidal_embedding(torch.tensor([n + m]), dim)[0].double().view(-1, 2)
    omega = torch.tensor([1.0 / 10000 ** (2 * j / dim) for j in range(dim // 2)], dtype=torch.float64)
    c, s = torch.cos(m * omega), torch.sin(m * omega)
    rotated = torch.stack((a[:, 0] * c + a[:, 1] * s, a[:, 1] * c - a[:, 0] * s), dim=-1)
    torch.testing.assert_close(rotated, b, atol=1e-6, rtol=0)


def test_large_positions_keep_precision() -> None:
    """Angles are computed in float64, so PE at p ~ 1e4 is accurate to float32 rounding."""
    dim, p = 64, 12345.0
    table = sinusoidal_embedding(torch.tensor([p]), dim)[0]
    assert table[0].item() == pytest.approx(math.sin(p), abs=1e-6)


def test_odd_width_is_rejected() -> None:
    with pytest.raises(ValueError, match="even"):
        sinusoidal_embedding(torch.tensor([1.0]), 7)


def test_module_adds_the_table() -> None:
    b, length, dim = 2, 6, 16
    module = SinusoidalPosition(dim, SinusoidalParams())
    assert module.uses_positions and not list(module.parameters())
    mask = torch.ones(b, length, dtype=torch.bool)
    positions = default_positions(mask) + torch.tensor([[0.0], [2.5]])
    x = torch.randn(b, length, dim)
    out = module(x, positions, mask)
    assert out.shape == (b, length, dim) and out.dtype == torch.float32
    expected = torch.tensor(
        [[[closed_form(positions[i, t].item(), m, dim) for m in range(dim)] for t in range(length)] for i in range(b)]
    )
    torch.testing.assert_close(out - x, expected.float(), atol=1e-6, rtol=0)
    # the module and the functional form agree exactly
    torch.testing.assert_close(out, x + sinusoidal_embedding(positions, dim), atol=0, rtol=0)
    # row 0 uses positions 0..L-1: the table of Vaswani et al.
    assert torch.allclose((out - x)[0, 0], torch.tensor([0.0, 1.0] * (dim // 2)), atol=1e-7)
