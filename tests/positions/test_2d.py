"""2-D position methods of the one registry (inputs over (B, N, 2) positions, CAPE-2D as an
augmentation): CAPE Eq. 3-4 closed form, §4 augmentations, abspos interpolation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posenc.config import from_dict
from posenc.errors import ConfigError, DataError
from posenc.positions import PositionConfig, build_augmentation, build_input, registry
from posenc.positions.grid2d import cape_frequencies, grid_shape, mean_normalize_2d, patch_centres, sinusoidal_2d


def build(name: str, d: int = 8, grid: tuple[int, int] = (7, 7)):
    """The input module of ``name`` (a 2-D method), its learned table sized to ``grid``."""
    return build_input(from_dict(PositionConfig, {"name": name, "learned2d": {"grid": list(grid)}}), d)


def cape(**params):
    return build_augmentation(from_dict(PositionConfig, {"name": "cape-2d", "cape2d": params}))


def grid_positions(gh: int, gw: int, batch: int = 1) -> torch.Tensor:
    """Mean-normalised centres, as the ViT hands them to every 2-D method."""
    return mean_normalize_2d(patch_centres(gh, gw).expand(batch, -1, -1))


def mask(batch: int, n: int) -> torch.Tensor:
    return torch.ones(batch, n, dtype=torch.bool)


def test_patch_centres_hand_computed():
    # 2 rows x 3 columns: x in {-2/3, 0, 2/3}, y in {-1/2, 1/2}, row-major.
    expected = torch.tensor(
        [[-2 / 3, -0.5], [0.0, -0.5], [2 / 3, -0.5], [-2 / 3, 0.5], [0.0, 0.5], [2 / 3, 0.5]]
    )
    assert torch.allclose(patch_centres(2, 3), expected, atol=1e-7)
    with pytest.raises(ConfigError):
        patch_centres(0, 3)


def test_cape_frequencies_eq4():
    w_x, w_y = cape_frequencies(4)  # K = 4: k = 1, 2; 10^(2k/K) = 10^0.5, 10^1
    assert torch.allclose(w_x, torch.tensor([10**0.5 * math.cos(1), 10 * math.cos(2)], dtype=torch.float64))
    assert torch.allclose(w_y, torch.tensor([10**0.5 * math.sin(1), 10 * math.sin(2)], dtype=torch.float64))
    with pytest.raises(ConfigError, match="even"):
        cape_frequencies(5)


@pytest.mark.parametrize("x,y", [(0.5, -0.25), (-1.0, 1.0), (0.3, 0.7)])
def test_sinusoidal_2d_closed_form(x: float, y: float):
    emb = build("sinusoidal-2d", d=4).embed(torch.tensor([[[x, y]]]))[0, 0]
    expected = []
    for k in (1, 2):
        rho = 10 ** (2 * k / 4)
        phase = math.pi * (rho * math.cos(k) * x + rho * math.sin(k) * y)
        expected += [math.cos(phase), math.sin(phase)]
    assert torch.allclose(emb, torch.tensor(expected), atol=1e-6)


def test_sinusoidal_2d_origin_and_width():
    emb = sinusoidal_2d(torch.zeros(3, 2), *cape_frequencies(6))
    assert emb.shape == (3, 6)
    assert torch.equal(emb, torch.tensor([1.0, 0.0] * 3).expand(3, 6))


def test_sinusoidal_2d_adds_to_input_and_ignores_cls():
    pos = build("sinusoidal-2d", d=8)
    x = torch.randn(2, 49, 8)
    p = grid_positions(7, 7, 2)
    assert torch.allclose(pos(x, p, mask(2, 49)) - x, pos.embed(p), atol=1e-6)
    assert pos.cls_position() is None


def test_cape_eval_is_the_identity_and_train_differs():
    aug, sin = cape(), build("sinusoidal-2d", d=16)
    x, p = torch.randn(3, 25, 16), grid_positions(5, 5, 3)
    aug.eval()
    assert torch.equal(aug(p, mask(3, 25)), p)
    assert torch.equal(sin(x, aug(p, mask(3, 25)), mask(3, 25)), sin(x, p, mask(3, 25)))
    aug.train()
    assert not torch.allclose(sin(x, aug(p, mask(3, 25)), mask(3, 25)), sin(x, p, mask(3, 25)), atol=1e-3)


def _augmented(grid: int, batch: int = 256, **params) -> torch.Tensor:
    aug = cape(**params).train()
    return aug(grid_positions(grid, grid, batch), mask(batch, grid * grid)).view(batch, grid, grid, 2)


@pytest.mark.parametrize("grid", [3, 7, 12])
def test_cape_augmentation_keeps_patch_order(grid: int):
    # εmax = 1/N is half the patch spacing 2/N: x grows along rows and y down columns.
    aug = _augmented(grid)
    assert (aug[:, :, 1:, 0] > aug[:, :, :-1, 0]).all()
    assert (aug[:, 1:, :, 1] > aug[:, :-1, :, 1]).all()


def test_cape_large_local_shift_breaks_order():
    # Control for the test above: εmax = 3/N exceeds half the spacing, so order breaks somewhere.
    aug = _augmented(7, local_shift=3.0)
    assert not (aug[:, :, 1:, 0] > aug[:, :, :-1, 0]).all()


def test_cape_global_shift_per_image_and_axis():
    aug = _augmented(7, local_shift=0.0, max_global_scaling=1.0, max_global_shift=0.5)
    delta = aug - grid_positions(7, 7, 256).view(256, 7, 7, 2)
    per_image = delta[:, :1, :1, :]
    assert torch.allclose(delta, per_image.expand_as(delta), atol=1e-6)  # one Δ per image and axis
    assert per_image.abs().max() <= 0.5
    assert per_image.abs().max() > 0.4  # the range is used
    assert not torch.allclose(per_image[..., 0], per_image[..., 1])  # Δx, Δy independent


def test_cape_global_scaling_shared_by_axes():
    aug = _augmented(4, local_shift=0.0, max_global_shift=0.0, max_global_scaling=1.4)
    ratio = aug / grid_positions(4, 4, 256).view(256, 4, 4, 2)
    per_image = ratio[:, :1, :1, :1]
    assert torch.allclose(ratio, per_image.expand_as(ratio), atol=1e-6)  # λ shared by x and y
    assert per_image.min() >= 1 / 1.4 - 1e-6 and per_image.max() <= 1.4 + 1e-6
    assert per_image.min() < 0.8 and per_image.max() > 1.25


def test_cape_local_shift_bounded_by_one_over_n():
    aug = _augmented(5, max_global_shift=0.0, max_global_scaling=1.0)
    eps = aug - grid_positions(5, 5, 256).view(256, 5, 5, 2)
    assert eps.abs().max() <= 1 / 5 + 1e-6
    assert eps.abs().max() > 0.9 / 5


def test_learned_same_grid_interpolation_is_identity_and_cls_untouched():
    pos = build("learned-2d", d=6, grid=(4, 5))
    cls_before = pos.cls_position().detach().clone()
    table = pos.grid_table((4, 5))
    assert torch.equal(table, pos.table.reshape(20, 6))
    pos.grid_table((8, 3))
    assert torch.equal(pos.cls_position(), cls_before)


def test_learned_bicubic_matches_torch_and_preserves_constants():
    pos = build("learned-2d", d=3, grid=(3, 3))
    table = pos.grid_table((6, 5)).view(6, 5, 3)
    ref = F.interpolate(pos.table.permute(2, 0, 1)[None], size=(6, 5), mode="bicubic", align_corners=False)[0]
    assert torch.allclose(table, ref.permute(1, 2, 0), atol=1e-6)
    with torch.no_grad():
        pos.table.fill_(0.25)
    assert torch.allclose(pos.grid_table((11, 2)), torch.full((22, 3), 0.25), atol=1e-6)


def test_learned_reads_the_grid_from_the_positions():
    pos = build("learned-2d", d=4, grid=(3, 3))
    x = torch.zeros(2, 6 * 5, 4)
    assert torch.equal(pos(x, grid_positions(6, 5, 2), mask(2, 30))[0], pos.grid_table((6, 5)))
    assert grid_shape(grid_positions(6, 5)) == (6, 5) and grid_shape(patch_centres(2, 9)[None]) == (2, 9)
    with pytest.raises(DataError, match="full 3x3 grid"):
        grid_shape(grid_positions(3, 3)[:, :8])


def test_none_ignores_2d_positions():
    pos = build("none")
    x = torch.randn(2, 9, 8)
    assert torch.equal(pos(x, grid_positions(3, 3, 2), mask(2, 9)), x)


def test_registry_and_config_validation():
    assert {"sinusoidal2d", "learned2d"} <= set(registry.INPUT) and "cape2d" in registry.AUGMENT
    methods = PositionConfig(name="cape-2d").methods
    assert (methods.input, methods.attention, methods.augment) == ("sinusoidal2d", None, "cape2d")
    with pytest.raises(ConfigError, match="needs input method sinusoidal2d"):
        PositionConfig(name="learned-2d+cape2d")
    with pytest.raises(ConfigError, match="max_global_scaling"):
        from_dict(PositionConfig, {"name": "cape-2d", "cape2d": {"max_global_scaling": 0.5}})
    with pytest.raises(ConfigError, match="local_shift"):
        from_dict(PositionConfig, {"name": "cape-2d", "cape2d": {"local_shift": -1}})
