"""ViT classifier: shapes at any resolution, CLS handling, position-method invariances."""

from __future__ import annotations

import pytest
import torch

from posenc.config import from_dict
from posenc.errors import ConfigError, DataError
from posenc.models.vit import ViT, ViTConfig


def vit(name: str, **overrides) -> ViT:
    cfg = {"image_size": 16, "patch": 4, "d_model": 16, "heads": 2, "layers": 2, "d_ff": 32, "position": {"name": name}}
    return ViT(from_dict(ViTConfig, {**cfg, **overrides})).eval()


@pytest.mark.parametrize("name", ["none", "learned-2d", "sinusoidal-2d", "cape-2d"])
@pytest.mark.parametrize("size", [8, 16, 28])
def test_logits_shape_any_divisible_resolution(name: str, size: int):
    model = vit(name)
    assert model(torch.randn(3, 1, size, size)).shape == (3, 10)
    assert model.embed(torch.randn(3, 1, size, size)).shape == (3, (size // 4) ** 2 + 1, 16)


def test_non_square_and_bad_inputs():
    model = vit("cape-2d")
    assert model(torch.randn(2, 1, 8, 20)).shape == (2, 10)
    with pytest.raises(DataError, match="30x30 is not divisible by patch size 4"):
        model(torch.randn(1, 1, 30, 30))
    with pytest.raises(DataError, match="expected images"):
        model(torch.randn(1, 3, 16, 16))


def test_config_validation():
    with pytest.raises(ConfigError, match="not divisible by model.patch"):
        ViTConfig(image_size=30, patch=4)
    with pytest.raises(ConfigError, match="heads"):
        ViTConfig(d_model=30, heads=4)
    for one_d in ("learned", "ape", "rpe", "shape"):  # 1-D methods of the same registry
        with pytest.raises(ConfigError, match="not a 2-D method"):
            from_dict(ViTConfig, {"position": {"name": one_d}})


def test_learned_table_covers_the_training_grid_and_parameter_counts():
    # The resolved config sizes the table; counts equal the former ViT's (patch embed, CLS,
    # 4 pre-LN GELU layers, final LN, head) plus the 7×7×64 + 64 learned positions.
    cfg = ViTConfig(image_size=28, patch=4)
    assert cfg.position.learned2d.grid == [7, 7]
    layer = 4 * (64 * 64 + 64) + (64 * 128 + 128) + (128 * 64 + 64) + 2 * 128  # attention, FFN, two LNs
    base = (16 * 64 + 64) + 64 + 4 * layer + 128 + (64 * 10 + 10)  # patches, CLS, layers, final LN, head
    assert base == 135818
    counts = {name: sum(p.numel() for p in ViT(from_dict(ViTConfig, {"position": {"name": name}})).parameters())
              for name in ("none", "sinusoidal-2d", "cape-2d", "learned-2d")}
    assert counts == {"none": base, "sinusoidal-2d": base, "cape-2d": base, "learned-2d": base + 49 * 64 + 64}


def _shuffle_patches(images: torch.Tensor, perm: torch.Tensor, patch: int) -> torch.Tensor:
    """Permute the non-overlapping patches of square images ``(B, C, H, H)``."""
    b, c, h, _ = images.shape
    g = h // patch
    blocks = images.view(b, c, g, patch, g, patch).permute(0, 2, 4, 1, 3, 5).reshape(b, g * g, c, patch, patch)
    blocks = blocks[:, perm].view(b, g, g, c, patch, patch)
    return blocks.permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, h)


def test_nopos_is_patch_permutation_invariant_and_positions_are_not():
    images, perm = torch.randn(2, 1, 16, 16), torch.randperm(16)
    shuffled = _shuffle_patches(images, perm, 4)
    assert not torch.equal(shuffled, images)
    nopos = vit("none")
    assert torch.allclose(nopos(shuffled), nopos(images), atol=1e-5)
    for name in ("learned-2d", "sinusoidal-2d"):
        model = vit(name)
        assert not torch.allclose(model(shuffled), model(images), atol=1e-3)


def test_cls_token_position_not_resized():
    model = vit("learned-2d")
    expected = model.cls_token + model.position.cls_position()
    for size in (8, 16, 24):
        assert torch.equal(model.embed(torch.randn(2, 1, size, size))[:, 0], expected.expand(2, -1))
    sin = vit("sinusoidal-2d")
    assert torch.equal(sin.embed(torch.randn(2, 1, 12, 12))[:, 0], sin.cls_token.expand(2, -1))


def test_eval_cape_model_equals_sinusoidal_model():
    cape, sin = vit("cape-2d"), vit("sinusoidal-2d")
    sin.load_state_dict(cape.state_dict())
    images = torch.randn(4, 1, 20, 20)
    assert torch.equal(cape(images), sin(images))
    cape.train()
    assert not torch.allclose(cape(images), sin(images), atol=1e-4)
