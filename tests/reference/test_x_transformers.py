"""xPos, CoPE and ALiBi's slopes against x-transformers (lucidrains), on the same inputs and weights:
``RotaryEmbedding(use_xpos=True)`` with ``apply_rotary_pos_emb``, ``CoPE``, and
``AlibiPositionalBias._get_slopes`` (the recipe of Press et al.'s public code, in float64)."""

from __future__ import annotations

import pytest
import torch

from posenc.positions.alibi import alibi_slopes
from posenc.positions.cope import CopeParams, CopePosition
from posenc.positions.xpos import XposParams, XposPosition

pytest.importorskip("x_transformers", reason="the xPos/CoPE references need x-transformers (pip install 'posenc[reference]')")
from x_transformers.x_transformers import (  # noqa: E402
    AlibiPositionalBias,
    CoPE,
    RotaryEmbedding,
    apply_rotary_pos_emb,
)


def test_alibi_slopes_equal_the_public_recipe_for_1_to_64_heads() -> None:
    for heads in range(1, 65):
        assert alibi_slopes(heads) == pytest.approx(AlibiPositionalBias._get_slopes(heads), rel=2e-15, abs=0)  # a few ulp


def xpos_products(length: int, dh: int, heads: int = 3) -> tuple[torch.Tensor, torch.Tensor, XposPosition]:
    """q′·k′ ``(B, H, L, L)`` of posenc and of x-transformers for the same q, k (float64 inputs)."""
    q, k = torch.randn(2, 2, heads, length, dh, dtype=torch.float64)
    ours = XposPosition(heads * dh, XposParams(), num_layers=1, num_heads=heads, causal=True)
    pos = torch.arange(length, dtype=torch.float32).expand(2, -1)
    ctx = ours.context(pos, pos)
    mine = ours.hook(0).transform_q(q, ctx) @ ours.hook(0).transform_k(k, ctx).transpose(-1, -2)
    rotary = RotaryEmbedding(dh, use_xpos=True, scale_base=512).double()
    freqs, scale = rotary.forward_from_seq_len(length)
    theirs = apply_rotary_pos_emb(q, freqs, scale) @ apply_rotary_pos_emb(k, freqs, scale**-1.0).transpose(-1, -2)
    return mine, theirs, ours


@pytest.mark.parametrize(("length", "dh"), [(10, 8), (140, 16), (600, 6)])
def test_xpos_products_equal_x_transformers(length: int, dh: int) -> None:
    """x-transformers centres the exponent on the sequence (ζ^{(n − L/2)/γ}); posenc's is the absolute
    position, which keeps cached keys valid. The centring cancels in q′·k′, so the products agree."""
    mine, theirs, _ = xpos_products(length, dh)
    # x-transformers' inverse frequencies are float32: its angles are off by ~p·1e-8 rad
    torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-7 * length)


def test_xpos_decoding_step_equals_x_transformers_full_pass() -> None:
    """One query at position n against cached keys 0..n (each scaled once, when it was new) gives row n
    of x-transformers' full pass, whose centre is that pass's own."""
    length, dh, heads = 50, 8, 3
    torch.manual_seed(1)
    q, k = torch.randn(2, 1, heads, length, dh, dtype=torch.float64)
    ours = XposPosition(heads * dh, XposParams(), num_layers=1, num_heads=heads, causal=True)
    pos = torch.arange(length, dtype=torch.float32)[None]
    keys = torch.cat([ours.hook(0).transform_k(k[:, :, i : i + 1], ours.context(pos[:, i : i + 1], pos[:, : i + 1]))
                      for i in range(length)], 2)
    step = ours.context(pos[:, -1:], pos)
    mine = ours.hook(0).transform_q(q[:, :, -1:], step) @ keys.transpose(-1, -2)
    rotary = RotaryEmbedding(dh, use_xpos=True, scale_base=512).double()
    freqs, scale = rotary.forward_from_seq_len(length)
    theirs = apply_rotary_pos_emb(q, freqs, scale) @ apply_rotary_pos_emb(k, freqs, scale**-1.0).transpose(-1, -2)
    torch.testing.assert_close(mine, theirs[:, :, -1:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("length", "max_positions", "heads"), [(9, 16, 2), (40, 12, 3), (33, 64, 5)])
def test_cope_logits_equal_x_transformers(length: int, max_positions: int, heads: int) -> None:
    """Gates, counts clamped to T − 1, interpolation between integer embeddings (Eq. 3-5): posenc's
    logits hook against x-transformers' ``CoPE`` (its table is posenc's transposed), causal, with padding."""
    dh, b = 8, 2
    ours = CopePosition(heads * dh, CopeParams(max_positions), num_layers=1, num_heads=heads, causal=True)
    theirs = CoPE(dim=dh, heads=heads, max_pos=max_positions).double()
    with torch.no_grad():
        ours.hooks[0].table.normal_()
        theirs.pos_emb.copy_(ours.hooks[0].table.t())
    q, k = torch.randn(2, b, heads, length, dh, dtype=torch.float64)
    allowed = torch.ones(length, length, dtype=torch.bool).tril()[None, None].repeat(b, 1, 1, 1)
    allowed[1, :, :, length - 3 :] = False  # padding of the second row
    allowed[1, :, length - 3 :, 0] = True  # (its padded queries keep one key)
    scaled = q @ k.transpose(-1, -2) / dh**0.5
    mine = ours.hooks[0].logits(q, k, scaled.masked_fill(~allowed, float("-inf")), None)
    masked = scaled.masked_fill(~allowed, -torch.finfo(torch.float64).max)
    expected = masked + theirs(q, masked)
    both = allowed.expand_as(mine)
    torch.testing.assert_close(mine[both], expected[both], rtol=0, atol=1e-12)
    torch.testing.assert_close(mine.softmax(-1), expected.softmax(-1), rtol=0, atol=1e-12)
