"""RoPE (Su et al. 2021): hand-computed rotation, relative property, partial rotary, options."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.errors import ConfigError
from posenc.positions import PositionConfig, build_attention, registry, resolve
from posenc.positions.rope import RopeParams, rope_angles, rotate


def test_two_dim_rotation_by_hand() -> None:
    x = torch.tensor([1.0, 2.0]).view(1, 1, 1, 2)
    angles = rope_angles(torch.tensor([[3.0]]), 1, RopeParams())  # θ_0 = 1: angle 3
    c, s = math.cos(3.0), math.sin(3.0)
    assert torch.allclose(rotate(x, angles).flatten(), torch.tensor([c - 2 * s, s + 2 * c]))


def test_scores_depend_only_on_position_difference() -> None:
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)
    p = RopeParams()

    def score(m: float, n: float) -> torch.Tensor:
        qm = rotate(q, rope_angles(torch.tensor([[m]]), 4, p))
        kn = rotate(k, rope_angles(torch.tensor([[n]]), 4, p))
        return (qm * kn).sum(-1)

    assert torch.allclose(score(5.0, 2.0), score(105.5, 102.5), atol=1e-5)
    assert not torch.allclose(score(5.0, 2.0), score(5.0, 3.0), atol=1e-3)


def test_partial_rotary_leaves_other_dims_untouched() -> None:
    rel = build_attention(PositionConfig(name="rope", rope=RopeParams(fraction=0.5)), 16, 1, 2)  # Dh 8
    assert rel.pairs == 2
    x = torch.randn(1, 2, 3, 8)
    ctx = rel.context(torch.arange(3.0)[None], torch.arange(3.0)[None])
    out = rel.hook(0).transform_q(x, ctx)
    assert torch.equal(out[..., 4:], x[..., 4:]) and not torch.allclose(out[..., :4], x[..., :4])
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-6)  # a rotation


def test_interpolation_divides_positions_and_ntk_scales_base() -> None:
    pos = torch.tensor([[0.0, 4.0, 9.0]])
    scaled = rope_angles(pos, 4, RopeParams(interpolation=4.0))
    assert torch.allclose(scaled, rope_angles(pos / 4, 4, RopeParams()))
    ntk = rope_angles(pos, 4, RopeParams(ntk=2.0))
    assert torch.allclose(ntk, rope_angles(pos, 4, RopeParams(base=10000.0 * 2 ** (8 / 6))))


def test_rope_composes_with_augmentations_and_rejects_bad_options() -> None:
    assert resolve("rope+cape").augment == "cape" and resolve("rope+randomized").augment == "randomized"
    with pytest.raises(ConfigError, match="shape augments absolute positions"):
        resolve("rope+shape")  # a global shift cancels in q_m·k_n (RoFormer Eq. 16): a no-op
    assert resolve("ape+rope+shape").augment == "shape"  # the sinusoidal input reads the shift
    with pytest.raises(ConfigError, match="rope.fraction"):
        RopeParams(fraction=0.0)
    shifted = " or ".join(sorted(n for n, e in registry.INPUT.items() if "shape" in e.augmentable_by))
    with pytest.raises(ConfigError, match=f"needs input method {shifted}, not none"):
        resolve("alibi+shape")  # the methods SHAPE may shift, as the registry declares them
