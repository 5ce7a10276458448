"""T5 relative position bias (Raffel et al. 2020): buckets by hand, shared table, fused path."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.models.attention import MultiHeadAttention, may_attend_mask
from posenc.positions import PositionConfig, build_attention, default_positions
from posenc.positions.t5 import t5_bucket


@pytest.mark.parametrize(
    ("rel", "bucket"),
    # 16 buckets per side, 8 exact: 8 + floor(8 · log(n/8)/log(16)), capped at 15; j > i adds 16.
    [(0, 0), (-1, 1), (-7, 7), (-8, 8), (-16, 10), (-32, 12), (-127, 15), (-128, 15), (-1000, 15),
     (1, 17), (20, 26), (500, 31)],
)
def test_bidirectional_buckets_by_hand(rel: int, bucket: int) -> None:
    assert int(t5_bucket(torch.tensor(rel), 32, 128, causal=False)) == bucket


@pytest.mark.parametrize(
    ("rel", "bucket"),
    # 32 buckets for i − j ≥ 0, 16 exact: 16 + floor(16 · log(n/16)/log(8)); future keys → 0.
    [(3, 0), (0, 0), (-1, 1), (-15, 15), (-20, 17), (-200, 31)],
)
def test_causal_buckets_by_hand(rel: int, bucket: int) -> None:
    assert int(t5_bucket(torch.tensor(rel), 32, 128, causal=True)) == bucket


def test_one_table_per_stack_with_per_head_scalars() -> None:
    rel = build_attention(PositionConfig(name="t5"), d_model=8, num_layers=3, num_heads=2)
    assert rel.hook(0) is rel.hook(2)
    assert sum(p.numel() for p in rel.parameters()) == 32 * 2
    pos = default_positions(torch.ones(1, 3, dtype=torch.bool))
    bias = rel.hook(0).bias(rel.context(pos, pos))  # (1, 2, 3, 3)
    table = rel.hook(0).table.weight  # (32, 2)
    assert torch.equal(bias[0, 1, 0, 2], table[18, 1]) and torch.equal(bias[0, 0, 2, 0], table[2, 0])


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_equals_softmax_of_biased_logits(causal: bool) -> None:
    torch.manual_seed(0)
    b, length, h, d = 2, 5, 4, 16
    rel = build_attention(PositionConfig(name="t5"), d_model=d, num_layers=1, num_heads=h, causal=causal)
    mha = MultiHeadAttention(d, h, hook=rel.hook(0)).eval()
    x, mask = torch.randn(b, length, d), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    pos = default_positions(mask)
    ctx, allowed = rel.context(pos, pos), may_attend_mask(mask, length, causal)
    out = mha(x, x, allowed, ctx)
    q, k, v = mha._split(mha.q_proj(x)), *mha.project_kv(x)
    logits = q @ k.transpose(-1, -2) / math.sqrt(d // h) + rel.hook(0).bias(ctx)
    attn = torch.softmax(logits.masked_fill(~allowed, float("-inf")), -1)
    ref = mha.out_proj((attn @ v).transpose(1, 2).reshape(b, length, d))
    assert torch.allclose(out, ref, atol=1e-5)
