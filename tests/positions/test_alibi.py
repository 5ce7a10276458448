"""ALiBi (Press et al. 2022): slopes and bias matrix by hand, fused attention equals the formula."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.config import from_dict
from posenc.errors import ConfigError
from posenc.models.attention import MultiHeadAttention, may_attend_mask
from posenc.positions import PositionConfig, build_attention, default_positions, resolve
from posenc.positions.alibi import alibi_slopes
from tests.conftest import tiny_config


def test_slopes_for_eight_heads_by_hand() -> None:
    assert alibi_slopes(8) == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]


def test_slopes_for_six_heads_follow_the_non_power_of_two_recipe() -> None:
    # 4 heads: 2^-2, 2^-4, 2^-6, 2^-8; then every other slope of 8 heads: 2^-1, 2^-3.
    assert alibi_slopes(6) == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]


def test_bias_matrix_by_hand() -> None:
    rel = build_attention(PositionConfig(name="alibi"), d_model=8, num_layers=2, num_heads=2)
    pos = default_positions(torch.ones(1, 3, dtype=torch.bool))
    bias = rel.hook(0).bias(rel.context(pos, pos))  # slopes 1/16, 1/256
    dist = torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]])
    assert torch.equal(bias[0, 0], -dist / 16) and torch.equal(bias[0, 1], -dist / 256)
    assert rel.hook(0) is rel.hook(1)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_equals_softmax_of_biased_logits(causal: bool) -> None:
    torch.manual_seed(0)
    b, length, h, d = 2, 5, 4, 16
    rel = build_attention(PositionConfig(name="alibi"), d_model=d, num_layers=1, num_heads=h)
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


def test_output_is_invariant_to_shifting_all_positions() -> None:
    torch.manual_seed(1)
    rel = build_attention(PositionConfig(name="alibi"), d_model=8, num_layers=1, num_heads=2)
    mha = MultiHeadAttention(8, 2, hook=rel.hook(0)).eval()
    x, mask = torch.randn(1, 4, 8), torch.ones(1, 4, dtype=torch.bool)
    pos, allowed = default_positions(mask), may_attend_mask(mask, 4, True)
    a = mha(x, x, allowed, rel.context(pos, pos))
    b = mha(x, x, allowed, rel.context(pos + 17, pos + 17))
    assert torch.allclose(a, b, atol=1e-6)


def test_alibi_is_parameter_free_and_rejects_absolute_augmentations() -> None:
    rel = build_attention(PositionConfig(name="alibi"), d_model=8, num_layers=3, num_heads=2)
    assert sum(p.numel() for p in rel.parameters()) == 0
    assert resolve("nope").input == "none" and resolve("nope+alibi").attention == "alibi"
    with pytest.raises(ConfigError, match="needs input method"):
        resolve("alibi+shape")


def alibi_encoder(asymmetric: bool):
    from posenc.models.transformer import Encoder

    torch.manual_seed(2)
    cfg = tiny_config("alibi", vocab=10, position_params={"alibi": {"asymmetric": asymmetric}})
    return Encoder(cfg).eval(), cfg.d_model


@pytest.mark.parametrize("asymmetric", [False, True])
def test_bidirectional_alibi_only_encoder_cannot_tell_left_from_right_unless_asymmetric(asymmetric: bool) -> None:
    """Symmetric |p_i − p_j|: an ALiBi-only encoder commutes with reversing the sequence (it cannot
    tell left from right); the asymmetric variant (+m/2 on keys to the left, Ruoss et al. code) does not."""
    enc, d = alibi_encoder(asymmetric)
    x, mask = torch.randn(1, 6, d), torch.ones(1, 6, dtype=torch.bool)
    pos = default_positions(mask)
    with torch.no_grad():
        out, flipped = enc(x, pos, mask), enc(x.flip(1), pos, mask).flip(1)
    assert torch.allclose(out, flipped, atol=1e-5) != asymmetric


def test_asymmetric_bias_by_hand_and_causal_stacks_keep_the_paper_form() -> None:
    cfg = from_dict(PositionConfig, {"name": "alibi", "alibi": {"asymmetric": True}})
    pos = default_positions(torch.ones(1, 3, dtype=torch.bool))
    rel = build_attention(cfg, d_model=8, num_layers=1, num_heads=2)
    dist = torch.tensor([[0.0, 1, 2], [0.5, 0, 1], [1.5, 0.5, 0]])  # keys left of the query: d − ½
    assert torch.equal(rel.hook(0).bias(rel.context(pos, pos))[0, 0], -dist / 16)
    causal = build_attention(cfg, d_model=8, num_layers=1, num_heads=2, causal=True)
    plain = build_attention(PositionConfig(name="alibi"), d_model=8, num_layers=1, num_heads=2, causal=True)
    assert torch.equal(causal.context(pos, pos).distance, plain.context(pos, pos).distance)
    with pytest.raises(ConfigError, match="alibi.asymmetric"):
        from_dict(PositionConfig, {"name": "alibi", "alibi": {"asymmetric": "yes"}})
