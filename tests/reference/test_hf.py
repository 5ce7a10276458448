"""T5 bias, ALiBi and RoPE against Hugging Face transformers' own code on the same inputs and weights:
``T5Attention._relative_position_bucket`` and ``compute_bias``; BLOOM's ``_get_alibi_slopes`` and
``build_alibi_tensor``; GPT-J's and Llama's ``apply_rotary_pos_emb``."""

from __future__ import annotations

import pytest
import torch

from posenc.positions.alibi import AlibiParams, AlibiPosition, alibi_slopes
from posenc.positions.rope import RopeParams, RotaryPosition
from posenc.positions.t5 import T5Params, T5RelativeBias, t5_bucket

pytest.importorskip("transformers", reason="the Hugging Face references need transformers (pip install 'posenc[test]')")
from transformers import LlamaConfig, T5Config  # noqa: E402
from transformers.models.bloom.modeling_bloom import _get_alibi_slopes, build_alibi_tensor  # noqa: E402
from transformers.models.gptj import modeling_gptj  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

# --- T5 ------------------------------------------------------------------------------------------

#: (buckets, max_distance): T5's default, odd bucket counts, a few buckets, a long reach.
T5_SETTINGS = [(32, 128), (33, 100), (9, 20), (16, 64), (64, 1000)]


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize(("buckets", "max_distance"), T5_SETTINGS)
def test_t5_buckets_equal_hf(buckets: int, max_distance: int, causal: bool) -> None:
    rel = torch.arange(-3 * max_distance, 3 * max_distance + 1)
    expected = T5Attention._relative_position_bucket(rel, bidirectional=not causal, num_buckets=buckets,
                                                     max_distance=max_distance)
    assert torch.equal(t5_bucket(rel, buckets, max_distance, causal), expected)


def t5_pair(buckets: int, max_distance: int, causal: bool, heads: int = 3) -> tuple[T5RelativeBias, T5Attention]:
    """posenc's T5 bias and an HF ``T5Attention`` holding the same ``(R, H)`` table."""
    ours = T5RelativeBias(heads * 4, T5Params(buckets, max_distance), num_layers=1, num_heads=heads, causal=causal)
    config = T5Config(d_model=heads * 4, d_kv=4, num_heads=heads, relative_attention_num_buckets=buckets,
                      relative_attention_max_distance=max_distance, is_decoder=causal, dropout_rate=0.0)
    hf = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
    with torch.no_grad():
        ours.shared.table.weight.normal_()
        hf.relative_attention_bias.weight.copy_(ours.shared.table.weight)
    return ours, hf


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize(("buckets", "max_distance"), T5_SETTINGS)
def test_t5_bias_equals_hf_compute_bias(buckets: int, max_distance: int, causal: bool) -> None:
    ours, hf = t5_pair(buckets, max_distance, causal)
    length = min(2 * max_distance + 7, 263)  # past max_distance except for 1000 (its buckets: above)
    pos = torch.arange(length, dtype=torch.float32)[None]
    bias = ours.hook(0).bias(ours.context(pos, pos))
    assert torch.equal(bias, hf.compute_bias(length, length))
    # a decoding step: the query at position `step` against the keys 0..step
    step = min(max_distance + 3, 261)
    keys = torch.arange(step + 1, dtype=torch.float32)[None]
    bias = ours.hook(0).bias(ours.context(keys[:, -1:], keys))
    assert torch.equal(bias, hf.compute_bias(1, step + 1, past_seen_tokens=step))


# --- ALiBi ---------------------------------------------------------------------------------------


def test_alibi_slopes_equal_bloom_for_1_to_64_heads() -> None:
    for heads in range(1, 65):
        ours = torch.tensor(alibi_slopes(heads), dtype=torch.float64)
        torch.testing.assert_close(ours, _get_alibi_slopes(heads, "cpu").double(), rtol=1e-6, atol=0)  # float32


def bloom_attention(heads: int, mask: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """BLOOM's causal attention weights: logits + build_alibi_tensor, then the causal and padding mask."""
    b, length = mask.shape
    alibi = build_alibi_tensor(mask.long(), heads, torch.float64).view(b, heads, 1, length)
    allowed = torch.ones(length, length, dtype=torch.bool).tril()[None, None] & mask[:, None, None, :]
    return (logits + alibi).masked_fill(~allowed, float("-inf")).softmax(-1)


@pytest.mark.parametrize("heads", [1, 5, 8, 12])
def test_alibi_causal_bias_equals_bloom_up_to_a_per_row_constant(heads: int) -> None:
    """BLOOM adds m_h·j to row i (softmax is invariant to the row's constant); the paper's −m_h·(i − j)
    is that minus m_h·i: equal bias up to the per-row constant, equal attention."""
    length = 11
    mask = torch.ones(3, length, dtype=torch.bool)
    mask[1, 7:] = False
    mask[2, 3:] = False
    pos = torch.arange(length, dtype=torch.float32).expand(3, -1)
    ours = AlibiPosition(8 * heads, AlibiParams(), num_layers=1, num_heads=heads, causal=True)
    bias = ours.hook(0).bias(ours.context(pos, pos)).double()
    b = mask.shape[0]
    alibi = build_alibi_tensor(mask.long(), heads, torch.float64).view(b, heads, 1, length)
    slopes = _get_alibi_slopes(heads, "cpu").double()[None, :, None, None]
    row = torch.arange(length, dtype=torch.float64)[None, None, :, None]
    allowed = (torch.ones(length, length, dtype=torch.bool).tril()[None, None] & mask[:, None, None, :]).expand_as(bias)
    torch.testing.assert_close((bias + slopes * row)[allowed], alibi.expand_as(bias)[allowed], rtol=1e-6, atol=1e-6)
    logits = torch.randn(b, heads, length, length, dtype=torch.float64)
    ours_attn = (logits + bias).masked_fill(~allowed, float("-inf")).softmax(-1)
    torch.testing.assert_close(ours_attn[allowed], bloom_attention(heads, mask, logits)[allowed], rtol=0, atol=1e-6)


# --- RoPE ----------------------------------------------------------------------------------------


def rotated(method: RotaryPosition, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """posenc's rotated queries ``(B, H, L, Dh)`` at ``positions (B, L)``."""
    return method.hook(0).transform_q(x, method.context(positions, positions))


@pytest.mark.parametrize("fraction", [1.0, 0.5], ids=["full", "partial"])
def test_rope_equals_gptj(fraction: float) -> None:
    """GPT-J rotates adjacent pairs (2j, 2j+1), as RoFormer Eq. 34 and posenc; partial rotary: the first
    ``rotary_dim`` dims."""
    b, h, length, dh = 2, 3, 37, 16
    rotary_dim = int(dh * fraction)
    x = torch.randn(b, h, length, dh)
    positions = torch.stack((torch.arange(length), torch.arange(length) + 90)).float()
    ours = rotated(RotaryPosition(h * dh, RopeParams(fraction=fraction), num_layers=1, num_heads=h), x, positions)
    sincos = modeling_gptj.create_sinusoidal_positions(200, rotary_dim)[positions.long()]
    sin, cos = torch.split(sincos, rotary_dim // 2, dim=-1)
    x_hf = x.transpose(1, 2)  # GPT-J's (B, L, H, Dh)
    turned = modeling_gptj.apply_rotary_pos_emb(x_hf[..., :rotary_dim], sin, cos)
    expected = torch.cat((turned, x_hf[..., rotary_dim:]), -1).transpose(1, 2)
    torch.testing.assert_close(ours, expected, rtol=0, atol=2e-5)


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_rope_equals_llama_after_its_dimension_order(base: float) -> None:
    """Llama rotates the pairs (j, j + Dh/2) (``rotate_half``); with the dims reordered so that posenc's
    pair (2j, 2j+1) sits at (j, j + Dh/2), the rotation is the same. A decoding step (one query at a
    later position) is rotated as the same position of a full pass."""
    b, h, length, dh = 2, 4, 29, 8
    order = torch.cat((torch.arange(0, dh, 2), torch.arange(1, dh, 2)))
    config = LlamaConfig(hidden_size=h * dh, num_attention_heads=h, num_key_value_heads=h, head_dim=dh,
                         max_position_embeddings=4096, rope_parameters={"rope_type": "default", "rope_theta": base})
    llama = modeling_llama.LlamaRotaryEmbedding(config)
    ours = RotaryPosition(h * dh, RopeParams(base=base), num_layers=1, num_heads=h)
    q, k = torch.randn(2, b, h, length, dh)
    position_ids = torch.stack((torch.arange(length), torch.arange(length) + 1000))
    cos, sin = llama(q, position_ids)
    q_hf, k_hf = modeling_llama.apply_rotary_pos_emb(q[..., order], k[..., order], cos, sin)
    positions = position_ids.float()
    ctx = ours.context(positions, positions)
    torch.testing.assert_close(ours.hook(0).transform_q(q, ctx)[..., order], q_hf, rtol=0, atol=5e-5)
    torch.testing.assert_close(ours.hook(0).transform_k(k, ctx)[..., order], k_hf, rtol=0, atol=5e-5)
    step = ours.context(positions[:, -1:], positions)
    torch.testing.assert_close(ours.hook(0).transform_q(q[:, :, -1:], step)[..., order], q_hf[:, :, -1:],
                               rtol=0, atol=5e-5)
