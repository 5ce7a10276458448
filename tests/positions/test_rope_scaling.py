"""RoPE scaling (YaRN, LongRoPE, Llama 3): inverse frequencies and attention factors equal Hugging
Face's own ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` on the same parameters; the
default (``scaling: none``) is today's RoPE; the attention factor multiplies the rotated q and k;
incremental decoding with the KV cache equals the full pass."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.config import from_dict
from posenc.errors import ConfigError
from posenc.positions import PositionConfig, build_attention, default_positions
from posenc.positions.rope import RopeParams, inverse_frequencies, rotate
from tests.helpers.lm import assert_incremental_equals_full_pass, tiny_lm

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402


def hf(rope_type: str, head_dim: int, params: dict, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """HF's inverse frequencies ``(P,)`` and attention factor for one head width and parameters."""
    cfg = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, max_position_embeddings=4096,
                      rope_parameters={"rope_type": rope_type, **params})
    inv, factor = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", seq_len=seq_len)
    return inv.double(), float(factor)


def ours(scaling: str, head_dim: int, **kw: object) -> tuple[torch.Tensor, float]:
    return inverse_frequencies(head_dim // 2, RopeParams(scaling=scaling, **kw))  # type: ignore[arg-type]


YARN = [  # (head width, base, factor, original length, beta_fast, beta_slow, truncate, attention factor)
    (64, 10000.0, 4.0, 64, 32.0, 1.0, True, 0.0), (128, 500000.0, 8.0, 2048, 32.0, 1.0, True, 0.0),
    (16, 10000.0, 2.0, 40, 16.0, 2.0, False, 0.0), (64, 10000.0, 16.0, 512, 32.0, 1.0, False, 1.25),
    (32, 1000.0, 1.0, 128, 32.0, 1.0, True, 0.0),
]


@pytest.mark.parametrize("dh,base,factor,length,fast,slow,truncate,attn", YARN)
def test_yarn_equals_hugging_face(dh, base, factor, length, fast, slow, truncate, attn) -> None:
    params = {"rope_theta": base, "factor": factor, "original_max_position_embeddings": length,
              "beta_fast": fast, "beta_slow": slow, "truncate": truncate}
    if attn:
        params["attention_factor"] = attn
    want, want_a = hf("yarn", dh, params)
    got, got_a = ours("yarn", dh, base=base, factor=factor, original_max_position=length, beta_fast=fast,
                      beta_slow=slow, yarn_truncate=truncate, attention_factor=attn)
    torch.testing.assert_close(got, want, rtol=2e-6, atol=0)
    assert got_a == pytest.approx(want_a, rel=1e-12)
    assert attn or factor == 1 or got_a == pytest.approx(0.1 * math.log(factor) + 1)  # YaRN §3.4


@pytest.mark.parametrize("dh,base,factor,length,low,high", [
    (64, 10000.0, 8.0, 64, 1.0, 4.0), (128, 500000.0, 8.0, 8192, 1.0, 4.0), (32, 10000.0, 3.0, 100, 2.0, 8.0)])
def test_llama3_equals_hugging_face(dh, base, factor, length, low, high) -> None:
    want, want_a = hf("llama3", dh, {"rope_theta": base, "factor": factor, "original_max_position_embeddings": length,
                                     "low_freq_factor": low, "high_freq_factor": high})
    got, got_a = ours("llama3", dh, base=base, factor=factor, original_max_position=length, low_freq_factor=low,
                      high_freq_factor=high)
    torch.testing.assert_close(got, want, rtol=2e-6, atol=0)
    assert got_a == want_a == 1.0


@pytest.mark.parametrize("target", [0, 64, 65, 300])
def test_longrope_equals_hugging_face(target: int) -> None:
    g = torch.Generator().manual_seed(5)
    short = (1 + torch.rand(16, generator=g)).tolist()
    long = (1 + 30 * torch.rand(16, generator=g).sort().values).tolist()
    params = {"rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
              "short_factor": short, "long_factor": long}
    want, want_a = hf("longrope", 32, params, seq_len=target or None)
    got, got_a = ours("longrope", 32, factor=4.0, original_max_position=64, short_factor=short, long_factor=long,
                      target_length=target)
    torch.testing.assert_close(got, want, rtol=2e-6, atol=0)
    assert got_a == pytest.approx(want_a, rel=1e-12) and got_a == pytest.approx(math.sqrt(1 + math.log(4) / math.log(64)))
    assert (target > 64) == torch.allclose(got, ours("none", 32)[0] / torch.tensor(long, dtype=torch.float64))


def test_default_is_plain_rope_bit_for_bit() -> None:
    """``scaling: none`` (the default) gives θ_j = base^(−j/P) and factor 1 exactly as before."""
    theta, factor = inverse_frequencies(8, RopeParams())
    assert factor == 1.0 and torch.equal(theta, 10000.0 ** (-torch.arange(8, dtype=torch.float64) / 8))
    rope = build_attention(PositionConfig(name="rope"), d_model=32, num_layers=1, num_heads=2)
    pos = default_positions(torch.ones(1, 5, dtype=torch.bool))
    ctx = rope.context(pos, pos)
    assert ctx.scale == 1.0 and torch.equal(ctx.q_angles, pos.double()[:, None, :, None] * theta)


def test_attention_factor_multiplies_rotated_q_and_k() -> None:
    cfg = from_dict(PositionConfig, {"name": "rope", "rope": {"scaling": "yarn", "factor": 4.0, "original_max_position": 16}})
    rope = build_attention(cfg, d_model=32, num_layers=1, num_heads=2)
    pos = default_positions(torch.ones(1, 6, dtype=torch.bool))
    ctx, x = rope.context(pos, pos), torch.randn(1, 2, 6, 16)
    a = 0.1 * math.log(4.0) + 1
    torch.testing.assert_close(rope.hook(0).transform_q(x, ctx), a * rotate(x, ctx.q_angles), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rope.hook(0).transform_k(x, ctx), a * rotate(x, ctx.k_angles), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rope", [
    {"scaling": "yarn", "factor": 4.0, "original_max_position": 4},
    {"scaling": "llama3", "factor": 4.0, "original_max_position": 8},
    {"scaling": "longrope", "factor": 4.0, "original_max_position": 4, "target_length": 9,
     "short_factor": [1.0, 1.5, 2.0, 2.5], "long_factor": [1.0, 2.0, 4.0, 8.0]},
], ids=["yarn", "llama3", "longrope"])
def test_incremental_equals_full_pass(rope: dict) -> None:
    assert_incremental_equals_full_pass(tiny_lm({"name": "rope", "rope": rope}))


@pytest.mark.parametrize("rope,match", [
    ({"scaling": "yarnn"}, "unknown"), ({"scaling": "yarn"}, "original_max_position"),
    ({"scaling": "yarn", "original_max_position": 8, "ntk": 2.0}, "replaces"),
    ({"scaling": "longrope", "original_max_position": 8}, "short_factor"),
])
def test_bad_scaling_options_are_one_line_errors(rope: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        from_dict(PositionConfig, {"name": "rope", "rope": rope})


def test_longrope_factor_count_is_checked_at_construction() -> None:
    cfg = from_dict(PositionConfig, {"name": "rope", "rope": {"scaling": "longrope", "original_max_position": 8,
                                                              "short_factor": [1.0], "long_factor": [1.0]}})
    with pytest.raises(ConfigError, match="need 8 factors"):
        build_attention(cfg, d_model=32, num_layers=1, num_heads=2)
