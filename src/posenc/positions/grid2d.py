"""Shared pieces of the 2-D position methods (CAPE, Likhomanenko et al. 2021, §3 and §5.1).

Shape legend: B batch, N patches (= gh·gw), gh/gw patch-grid height/width, D model width.

2-D methods take positions ``(B, N, 2)``: the (x, y) centre of every patch in row-major patch
order (row = y index, column = x index). Patch i of n along an axis covers
[−1 + 2i/n, −1 + 2(i+1)/n], so its centre is x_i = −1 + (2i+1)/n (spacing 2/n) and the same
image location has the same coordinate at every resolution. Each axis spans [−1, 1] on its own
(no aspect-ratio correction; the paper gives none and all images here are square). The model
hands the methods mean-normalised centres (CAPE §4 step i; the identity up to rounding for full
grids, whose centres are symmetric), so the grid size can be read back from the first centre
(on the device: :func:`grid_sizes_xy`), and the grid ``(gh, gw)`` itself (``state["grid"]`` of an
input method), so nothing is read back to the host.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc.errors import ConfigError, DataError
from posenc.positions.base import InputPosition


def patch_centres(gh: int, gw: int, device: torch.device | str | None = None) -> Tensor:
    """(x, y) centres of a ``gh × gw`` patch grid in [−1, 1]², row-major.

    Args:
        gh: patch rows.
        gw: patch columns.
        device: where the centres are built (None: the default device).

    Returns:
        Float32 centres ``(gh·gw, 2)``.

    Raises:
        ConfigError: a grid smaller than 1×1.
    """
    if gh < 1 or gw < 1:
        raise ConfigError(f"patch grid must be at least 1x1, got {gh}x{gw}")
    xs = (2 * torch.arange(gw, dtype=torch.float64, device=device) + 1 - gw) / gw  # built on the device: no copy
    ys = (2 * torch.arange(gh, dtype=torch.float64, device=device) + 1 - gh) / gh
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack((grid_x, grid_y), dim=-1).reshape(gh * gw, 2).to(torch.float32)


def mean_normalize_2d(positions: Tensor) -> Tensor:
    """CAPE §4 step i: subtract each image's mean patch coordinate.

    Args:
        positions: patch centres ``(B, N, 2)``.

    Returns:
        The centred coordinates ``(B, N, 2)``.
    """
    return positions - positions.mean(dim=1, keepdim=True)


def grid_sizes_xy(positions: Tensor) -> Tensor:
    """The grid size of a full grid of patch centres along each coordinate axis, in a centre's
    (x, y) order, so ``(gw, gh)`` (:func:`grid_shape` is ``(gh, gw)``, rows first), read on their
    device (no host sync): the first centre is (−1 + 1/gw, −1 + 1/gh), so gw = round(1 / (x0 + 1))
    and gh = round(1 / (y0 + 1)) (round half to even, as Python's).

    Args:
        positions: (mean-normalised) patch centres ``(B, N, 2)`` of a full grid.

    Returns:
        ``(gw, gh)`` as a float64 tensor ``(2,)`` on their device, broadcasting against a centre's (x, y).
    """
    return torch.round(1.0 / (positions[0, 0].to(torch.float64) + 1.0))


def grid_shape(positions: Tensor, grid: tuple[int, int] | None = None) -> tuple[int, int]:
    """The grid shape of a full grid of patch centres, checked against their number.

    Args:
        positions: (mean-normalised) patch centres ``(B, N, 2)``.
        grid: ``(gh, gw)`` when the caller knows it (the ViT does; nothing is read from the device);
            None: read from the first centre (−1 + 1/gw, −1 + 1/gh), a host read.

    Returns:
        ``(gh, gw)``, rows first as in a tensor's shape (:func:`grid_sizes_xy` is ``(gw, gh)``).

    Raises:
        DataError: gh·gw is not the number of patches N.
    """
    if grid is None:
        x0, y0 = (float(v) for v in positions[0, 0])
        grid = round(1.0 / (y0 + 1.0)), round(1.0 / (x0 + 1.0))
    gh, gw = (int(g) for g in grid)
    if gh * gw != positions.shape[1]:
        raise DataError(f"2-D positions: {positions.shape[1]} patches are not the full {gh}x{gw} grid "
                        "their first centre implies")
    return gh, gw


def cape_frequencies(dim: int) -> tuple[Tensor, Tensor]:
    """The frequencies of CAPE Eq. 4 for k = 1..dim/2: w_{k,x} = 10^{2k/K} cos k,
    w_{k,y} = 10^{2k/K} sin k (the largest |w| is 10).

    Args:
        dim: embedding width K, even.

    Returns:
        ``(w_x, w_y)``, float64, each ``(dim/2,)``.

    Raises:
        ConfigError: an odd width.
    """
    if dim % 2:
        raise ConfigError(f"2-D sinusoidal embeddings need an even width, got {dim}")
    k = torch.arange(1, dim // 2 + 1, dtype=torch.float64)
    rho = 10.0 ** (2.0 * k / dim)
    return rho * torch.cos(k), rho * torch.sin(k)


def sinusoidal_2d(positions: Tensor, w_x: Tensor, w_y: Tensor) -> Tensor:
    """CAPE Eq. 3: component j = k−1 gives E_{2j} = cos π(w_{k,x}x + w_{k,y}y), E_{2j+1} = sin π(...).

    Args:
        positions: (x, y) coordinates ``(..., 2)``.
        w_x: x frequencies ``(K/2,)`` (:func:`cape_frequencies`).
        w_y: y frequencies ``(K/2,)``.

    Returns:
        Float32 embeddings ``(..., 2·len(w_x))``.
    """
    pos = positions.to(torch.float64)
    phase = math.pi * (pos[..., :1] * w_x.to(pos.device) + pos[..., 1:] * w_y.to(pos.device))
    return torch.stack((phase.cos(), phase.sin()), dim=-1).flatten(-2).to(torch.float32)


class Input2d(InputPosition):
    """Input method over 2-D positions: ``x (B, N, D), positions (B, N, 2) -> (B, N, D)``;
    :meth:`cls_position` is the embedding a ViT adds to its CLS token (None: nothing)."""

    position_dims = 2
    uses_positions = True
    ct2_refusal = "2-D image positions; CTranslate2's position tables are 1-D"

    def cls_position(self) -> Tensor | None:
        """The position embedding of the CLS token.

        Returns:
            A ``(D,)`` embedding, or None: the CLS token gets no position term.
        """
        return None
