"""xPos (Sun et al. 2022): ζ by hand, q_n·k_m against the paper's formula, causal only, KV cache."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.errors import ConfigError
from posenc.positions import PositionConfig, build_attention
from posenc.positions.xpos import xpos_zeta


def test_zeta_by_hand() -> None:
    # Dh = 8: ζ_j = (2j + 3.2) / 11.2
    want = [3.2 / 11.2, 5.2 / 11.2, 7.2 / 11.2, 9.2 / 11.2]
    assert xpos_zeta(4).tolist() == pytest.approx(want, rel=1e-15)
    assert want == pytest.approx([0.2857142857, 0.4642857143, 0.6428571429, 0.8214285714], rel=1e-9)


@pytest.mark.parametrize("n,m", [(0, 0), (5, 3), (700, 100), (1500, 1499)])
def test_query_key_product_equals_the_papers_formula(n: int, m: int) -> None:
    """q_n·k_m = Σ_j ζ_j^((n−m)/512) [(q0k0 + q1k1) cos((m−n)θ_j) + (q1k0 − q0k1) sin((m−n)θ_j)]."""
    dh = 8
    xpos = build_attention(PositionConfig(name="xpos"), d_model=2 * dh, num_layers=1, num_heads=2, causal=True)
    torch.manual_seed(n)
    q, k = torch.randn(1, 1, 1, dh, dtype=torch.float64), torch.randn(1, 1, 1, dh, dtype=torch.float64)
    ctx = xpos.context(torch.tensor([[float(n)]]), torch.tensor([[float(m)]]))
    got = float((xpos.hook(0).transform_q(q, ctx) * xpos.hook(0).transform_k(k, ctx)).sum())
    want = 0.0
    for j in range(dh // 2):
        theta, zeta = 10000.0 ** (-j / (dh // 2)), (2 * j + 0.4 * dh) / (1.4 * dh)
        q0, q1, k0, k1 = float(q[..., 2 * j]), float(q[..., 2 * j + 1]), float(k[..., 2 * j]), float(k[..., 2 * j + 1])
        c = (m - n) * theta
        want += zeta ** ((n - m) / 512) * ((q0 * k0 + q1 * k1) * math.cos(c) + (q1 * k0 - q0 * k1) * math.sin(c))
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_bidirectional_stacks_are_refused() -> None:
    with pytest.raises(ConfigError, match="xpos is causal only"):
        build_attention(PositionConfig(name="xpos"), d_model=16, num_layers=1, num_heads=2, causal=False)

