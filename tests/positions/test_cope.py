"""CoPE (Golovneva et al. 2024): contextual positions by hand, the attention against a per-pair loop
of Eq. 3-5, causal only, KV cache = full pass."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.config import from_dict
from posenc.errors import ConfigError
from posenc.models.attention import MultiHeadAttention, may_attend_mask
from posenc.positions import PositionConfig, build_attention, resolve
from posenc.positions.cope import cope_positions
from tests.helpers.lm import assert_incremental_equals_full_pass, tiny_lm

INF = float("inf")


def test_contextual_positions_by_hand() -> None:
    """Gates σ(0) = 0.5, σ(ln 3) = 0.75, σ(−ln 3) = 0.25; p_ij = Σ_{k=j..i} g_ik."""
    l3 = math.log(3)
    logits = torch.tensor([[0.0, -INF, -INF], [l3, 0.0, -INF], [0.0, l3, -l3]])[None, None]
    want = torch.tensor([[0.5, 0, 0], [1.25, 0.5, 0], [1.5, 1.0, 0.25]])
    torch.testing.assert_close(cope_positions(logits, 64)[0, 0], want)
    assert float(cope_positions(logits, 2)[0, 0, 2, 0]) == 1.0  # clamped to T − 1


def loop_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Eq. 3-5 pair by pair for one head, causal: q, k, v ``(L, Dh)``, e ``(Dh, T)`` → ``(L, Dh)``."""
    length, dh = q.shape
    t_max = table.shape[1]
    out = torch.zeros_like(v)
    for i in range(length):
        gates = [torch.sigmoid(q[i] @ k[m] / math.sqrt(dh)) for m in range(i + 1)]
        logits = []
        for j in range(i + 1):
            p = min(float(sum(gates[j : i + 1])), t_max - 1)
            lo, w = math.floor(p), p - math.floor(p)
            e = table[:, lo] + w * (table[:, min(lo + 1, t_max - 1)] - table[:, lo])
            logits.append(q[i] @ k[j] / math.sqrt(dh) + q[i] @ e)
        out[i] = torch.softmax(torch.stack(logits), 0) @ v[: i + 1]
    return out


@pytest.mark.parametrize("t_max", [64, 3])
def test_attention_equals_the_papers_equations(t_max: int) -> None:
    torch.manual_seed(0)
    d, h, length = 12, 2, 6
    cfg = from_dict(PositionConfig, {"name": "cope", "cope": {"max_positions": t_max}})
    cope = build_attention(cfg, d_model=d, num_layers=1, num_heads=h, causal=True)
    with torch.no_grad():
        cope.hook(0).table.normal_()
    mha = MultiHeadAttention(d, h, hook=cope.hook(0)).eval()
    x = torch.randn(1, length, d, dtype=torch.float64)
    mha, cope = mha.double(), cope.double()
    allowed = may_attend_mask(torch.ones(1, length, dtype=torch.bool), length, causal=True)
    with torch.no_grad():
        got = mha(x, x, allowed)
        q, (k, v) = mha._split(mha.q_proj(x)), mha.project_kv(x)
        heads = [loop_reference(q[0, n], k[0, n], v[0, n], cope.hook(0).table) for n in range(h)]
        want = mha.out_proj(torch.stack(heads, 1).reshape(1, length, d))  # (L, H, Dh) → (1, L, D)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_bidirectional_stacks_and_augmentations_are_refused() -> None:
    with pytest.raises(ConfigError, match="cope is causal only"):
        build_attention(PositionConfig(name="cope"), d_model=16, num_layers=1, num_heads=2, causal=False)
    with pytest.raises(ConfigError, match="randomized"):
        resolve("cope+randomized")


def test_incremental_equals_full_pass() -> None:
    model = tiny_lm({"name": "cope", "cope": {"max_positions": 5}})  # positions clamped at T − 1 = 4
    with torch.no_grad():
        for hook in model.stack.attn_pos.hooks:
            hook.table.normal_()
    assert_incremental_equals_full_pass(model)
