"""The 2-D methods read nothing back from the device: CAPE-2d's local shift bound comes from the
first centre on the device (``grid_sizes_xy``), the learned table's grid from the ViT (``state["grid"]``),
the patch centres are built on the device. Results equal the host-read computation they replace."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.config import from_dict
from posenc.errors import DataError
from posenc.models.vit import ViT, ViTConfig
from posenc.positions import PositionConfig, build_augmentation, build_input
from posenc.positions.grid2d import grid_shape, grid_sizes_xy, mean_normalize_2d, patch_centres
from tests.helpers.cuda import cuda_only

GRIDS = [(1, 1), (3, 3), (6, 5), (2, 9), (7, 7), (14, 14), (16, 3)]


def positions(gh: int, gw: int, batch: int = 3, device: str = "cpu") -> torch.Tensor:
    return mean_normalize_2d(patch_centres(gh, gw, device).expand(batch, -1, -1))


def old_patch_centres(gh: int, gw: int) -> torch.Tensor:
    """The centres as built before (on the host, then copied)."""
    xs = (2 * torch.arange(gw, dtype=torch.float64) + 1 - gw) / gw
    ys = (2 * torch.arange(gh, dtype=torch.float64) + 1 - gh) / gh
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack((grid_x, grid_y), dim=-1).reshape(gh * gw, 2).to(torch.float32)


def old_grid_shape(pos: torch.Tensor) -> tuple[int, int]:
    """The grid as read before: the first centre on the host."""
    x0, y0 = (float(v) for v in pos[0, 0])
    return round(1.0 / (y0 + 1.0)), round(1.0 / (x0 + 1.0))


def old_cape2d(pos: torch.Tensor, shift: float, local_shift: float, scaling: float) -> torch.Tensor:
    """CAPE-2d's training transform as computed before (bounds as host tensors, grid read on the host)."""
    def uniform(shape: tuple[int, ...], bound: torch.Tensor) -> torch.Tensor:
        u = torch.rand(shape, device=pos.device, dtype=pos.dtype) * 2 - 1
        return u * bound.to(pos.device, pos.dtype)

    gh, gw = old_grid_shape(pos)
    b = pos.shape[0]
    delta = uniform((b, 1, 2), torch.tensor([shift] * 2))
    local = uniform(tuple(pos.shape), torch.tensor([local_shift / gw, local_shift / gh]))
    log_scale = uniform((b, 1, 1), torch.tensor([math.log(scaling)]))
    return (pos + delta + local) * log_scale.exp()


@pytest.mark.parametrize(("gh", "gw"), GRIDS)
def test_centres_and_grid_equal_the_host_computation(gh: int, gw: int) -> None:
    assert torch.equal(patch_centres(gh, gw), old_patch_centres(gh, gw))
    pos = positions(gh, gw)
    assert grid_sizes_xy(pos).tolist() == [float(gw), float(gh)] and old_grid_shape(pos) == (gh, gw)
    assert grid_shape(pos) == grid_shape(pos, (gh, gw)) == (gh, gw)
    with pytest.raises(DataError, match="full"):
        grid_shape(pos, (gh + 1, gw))


@pytest.mark.parametrize(("gh", "gw"), GRIDS)
@pytest.mark.parametrize("params", [{}, {"local_shift": 0.3, "max_global_shift": 0.7, "max_global_scaling": 2.0}])
def test_cape2d_equals_the_host_read_version(gh: int, gw: int, params: dict) -> None:
    aug = build_augmentation(from_dict(PositionConfig, {"name": "cape-2d", "cape2d": params})).train()
    p = aug.params
    pos = positions(gh, gw)
    torch.manual_seed(5)
    new = aug(pos, torch.ones(pos.shape[:2], dtype=torch.bool))
    torch.manual_seed(5)
    old = old_cape2d(pos, p.max_global_shift, p.local_shift, p.max_global_scaling)
    assert torch.equal(new, old)


@pytest.mark.parametrize("grid", [(7, 7), (4, 4), (6, 5)])
def test_learned2d_with_the_vits_grid_equals_reading_it(grid: tuple[int, int]) -> None:
    method = build_input(from_dict(PositionConfig, {"name": "learned-2d", "learned2d": {"grid": [7, 7]}}), 8)
    pos = positions(*grid)
    x = torch.randn(3, grid[0] * grid[1], 8)
    mask = torch.ones(pos.shape[:2], dtype=torch.bool)
    assert torch.equal(method(x, pos, mask, {"grid": grid}), method(x, pos, mask))


def test_nothing_is_read_from_the_device() -> None:
    """On the meta device every read of a value fails: the old grid read does, the new code runs."""
    pos = positions(6, 5, device="meta")
    with pytest.raises((NotImplementedError, RuntimeError)):
        old_grid_shape(pos)
    visible = torch.ones(3, 30, dtype=torch.bool, device="meta")
    out = build_augmentation(PositionConfig(name="cape-2d")).train()(pos, visible)
    assert out.device.type == "meta" and out.shape == (3, 30, 2)
    method = build_input(from_dict(PositionConfig, {"name": "learned-2d", "learned2d": {"grid": [7, 7]}}), 8).to("meta")
    x = torch.empty(3, 30, 8, device="meta")
    assert method(x, pos, visible, {"grid": (6, 5)}).shape == (3, 30, 8)


@cuda_only("host-sync detection needs CUDA")
@pytest.mark.parametrize("name", ["cape-2d", "learned-2d", "sinusoidal-2d"])
def test_vit_embed_does_not_sync_on_cuda(name: str) -> None:
    vit = ViT(from_dict(ViTConfig, {"image_size": 28, "patch": 4, "d_model": 16, "heads": 2, "layers": 1,
                                    "position": {"name": name}})).cuda().train()
    images = torch.randn(2, 1, 24, 32, device="cuda")  # another grid than the training one (6x8)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = vit.embed(images)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.shape == (2, 6 * 8 + 1, 16)
