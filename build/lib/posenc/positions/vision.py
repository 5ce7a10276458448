"""2-D position methods for Vision Transformers (CAPE, Likhomanenko et al. 2021, §3 and §5.1).

Shape legend: B batch, N patches (= gh·gw), gh/gw patch-grid height/width, D model width,
K = D embedding width.

Positions are explicit: ``positions (B, N, 2)`` holds the (x, y) centre of every patch, in
row-major patch order (row = y index, column = x index). Every method maps patch embeddings
``x (B, N, D)`` plus positions and the grid shape to ``(B, N, D)``; ``cls_position()`` is the
embedding added to the CLS token (``None``: nothing is added).

Methods (``VISION_POSITIONS`` name → class):

* ``none``: no position information (the paper's *nopos*).
* ``learned``: *abspos* of ViT/DeiT: a learned ``(gh, gw, D)`` table for the training grid,
  bicubically interpolated to another grid (DeiT, as used in CAPE §5.1); the CLS token has its
  own learned position, never interpolated (CAPE §5.1 footnote 5).
* ``sinusoidal-2d``: *sinpos*, CAPE Eq. 3-4 on coordinates scaled to [−1, 1].
* ``cape-2d``: sinpos plus the CAPE training augmentations of §4 (global shift Eq. 5, local
  shift Eq. 6, global scaling Eq. 7). Eval: no augmentation, identical to ``sinusoidal-2d``.

Choices (the paper leaves them open):

* Patch centres: patch i of n along an axis covers [−1 + 2i/n, −1 + 2(i+1)/n], so its centre is
  x_i = −1 + (2i+1)/n (spacing 2/n). The same image location has the same coordinate at every
  resolution. Each axis spans [−1, 1] on its own (no aspect-ratio correction; the paper gives
  none and all images here are square).
* Frequencies: k = 1..K/2 as the paper states for Eq. 1, stored 0-based: component j = k−1
  gives E_{2j} = cos π(w_{k,x}x + w_{k,y}y), E_{2j+1} = sin π(...), w_{k,x} = 10^{2k/K} cos k,
  w_{k,y} = 10^{2k/K} sin k (Eq. 3-4). The largest |w| is 10, i.e. ≈5 periods per unit.
* Mean normalisation (§4 step i): both ``sinusoidal-2d`` and ``cape-2d`` subtract the mean
  patch coordinate (the identity up to rounding for full grids, whose centres are symmetric),
  so eval-mode ``cape-2d`` runs exactly the ``sinusoidal-2d`` computation.
* CLS token: sinpos/CAPE add no position to it (it is already a unique learned vector).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.config import require
from posenc.errors import ConfigError


@dataclass
class VisionPositionConfig:
    """Which 2-D position method, with CAPE's augmentation bounds (paper values as defaults).

    ``local_shift`` is εmax in units of 1/n (n = patches along that axis): 1.0 gives the
    paper's εmax = 1/N, i.e. half the patch spacing 2/n, the largest value that keeps the order
    of patches along each axis.
    """

    name: str = "cape-2d"
    max_global_shift: float = 0.5  # Δmax (Eq. 5), in [−1, 1] coordinate units
    local_shift: float = 1.0  # εmax = local_shift / n (Eq. 6)
    max_global_scaling: float = 1.4  # λmax (Eq. 7)

    def __post_init__(self) -> None:
        require(self.name in VISION_POSITIONS, f"vision position {self.name!r} unknown (known: {', '.join(VISION_POSITIONS)})")
        require(self.max_global_shift >= 0, f"max_global_shift must be >= 0, got {self.max_global_shift}")
        require(self.local_shift >= 0, f"local_shift must be >= 0, got {self.local_shift}")
        require(self.max_global_scaling >= 1, f"max_global_scaling (λmax) must be >= 1, got {self.max_global_scaling}")


def patch_centres(gh: int, gw: int, device: torch.device | str | None = None) -> Tensor:
    """(x, y) centres of a ``gh × gw`` patch grid in [−1, 1]², row-major: ``(gh·gw, 2)``."""
    if gh < 1 or gw < 1:
        raise ConfigError(f"patch grid must be at least 1x1, got {gh}x{gw}")
    xs = (2 * torch.arange(gw, dtype=torch.float64) + 1 - gw) / gw
    ys = (2 * torch.arange(gh, dtype=torch.float64) + 1 - gh) / gh
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack((grid_x, grid_y), dim=-1).reshape(gh * gw, 2).to(torch.float32).to(device)


def cape_frequencies(dim: int) -> tuple[Tensor, Tensor]:
    """(w_x, w_y) of CAPE Eq. 4 for k = 1..dim/2, float64, each ``(dim/2,)``."""
    if dim % 2:
        raise ConfigError(f"2-D sinusoidal embeddings need an even width, got {dim}")
    k = torch.arange(1, dim // 2 + 1, dtype=torch.float64)
    rho = 10.0 ** (2.0 * k / dim)
    return rho * torch.cos(k), rho * torch.sin(k)


def sinusoidal_2d(positions: Tensor, w_x: Tensor, w_y: Tensor) -> Tensor:
    """CAPE Eq. 3: ``positions (..., 2)`` → ``(..., 2·len(w_x))``, cos at even, sin at odd."""
    pos = positions.to(torch.float64)
    phase = math.pi * (pos[..., :1] * w_x.to(pos.device) + pos[..., 1:] * w_y.to(pos.device))
    return torch.stack((phase.cos(), phase.sin()), dim=-1).flatten(-2).to(torch.float32)


def mean_normalize_2d(positions: Tensor) -> Tensor:
    """CAPE §4 step i: subtract each image's mean patch coordinate, ``(B, N, 2)`` → ``(B, N, 2)``."""
    return positions - positions.mean(dim=1, keepdim=True)


class VisionPosition(nn.Module):
    """Base: ``forward(x (B,N,D), positions (B,N,2), grid (gh, gw)) -> (B,N,D)``."""

    def forward(self, x: Tensor, positions: Tensor, grid: tuple[int, int]) -> Tensor:
        raise NotImplementedError

    def cls_position(self) -> Tensor | None:
        """``(D,)`` embedding added to the CLS token, or None."""
        return None


class NoPosition2d(VisionPosition):
    def __init__(self, d_model: int, train_grid: tuple[int, int], params: VisionPositionConfig) -> None:
        super().__init__()

    def forward(self, x: Tensor, positions: Tensor, grid: tuple[int, int]) -> Tensor:
        return x


class LearnedPosition2d(VisionPosition):
    """ViT *abspos*: learned ``(gh, gw, D)`` table, bicubic resize to other grids (DeiT)."""

    def __init__(self, d_model: int, train_grid: tuple[int, int], params: VisionPositionConfig) -> None:
        super().__init__()
        self.train_grid = tuple(train_grid)
        self.table = nn.Parameter(torch.empty(*train_grid, d_model))
        self.cls = nn.Parameter(torch.empty(d_model))
        nn.init.trunc_normal_(self.table, std=0.02)
        nn.init.trunc_normal_(self.cls, std=0.02)

    def grid_table(self, grid: tuple[int, int]) -> Tensor:
        """The table resized to ``grid`` (bicubic, align_corners=False): ``(gh·gw, D)``.

        At the training grid this is the identity (the bicubic kernel at zero offset is 1)."""
        chw = self.table.permute(2, 0, 1).unsqueeze(0)  # (1, D, gh0, gw0)
        out = F.interpolate(chw, size=tuple(grid), mode="bicubic", align_corners=False)
        return out[0].permute(1, 2, 0).reshape(grid[0] * grid[1], -1)

    def forward(self, x: Tensor, positions: Tensor, grid: tuple[int, int]) -> Tensor:
        return x + self.grid_table(grid).to(x.dtype)

    def cls_position(self) -> Tensor | None:
        return self.cls


class SinusoidalPosition2d(VisionPosition):
    """CAPE *sinpos* (Eq. 3-4) of mean-normalised patch centres."""

    def __init__(self, d_model: int, train_grid: tuple[int, int], params: VisionPositionConfig) -> None:
        super().__init__()
        w_x, w_y = cape_frequencies(d_model)
        self.register_buffer("w_x", w_x, persistent=False)
        self.register_buffer("w_y", w_y, persistent=False)

    def embed(self, positions: Tensor) -> Tensor:
        """``(B, N, 2)`` → ``(B, N, D)``."""
        return sinusoidal_2d(positions, self.w_x, self.w_y)

    def forward(self, x: Tensor, positions: Tensor, grid: tuple[int, int]) -> Tensor:
        return x + self.embed(mean_normalize_2d(positions)).to(x.dtype)


class CapePosition2d(SinusoidalPosition2d):
    """CAPE (§4): sinpos of augmented coordinates in training, plain sinpos in eval."""

    def __init__(self, d_model: int, train_grid: tuple[int, int], params: VisionPositionConfig) -> None:
        super().__init__(d_model, train_grid, params)
        self.params = params

    def augment(self, positions: Tensor, grid: tuple[int, int]) -> Tensor:
        """Training transform of ``(B, N, 2)`` coordinates: steps i-iv of CAPE §4."""
        p, b = self.params, positions.shape[0]
        pos = mean_normalize_2d(positions)  # (i)
        shift = _uniform((b, 1, 2), torch.tensor([p.max_global_shift] * 2), pos)  # (ii) Δx, Δy, Eq. 5
        local_bound = torch.tensor([p.local_shift / grid[1], p.local_shift / grid[0]])
        local = _uniform(tuple(pos.shape), local_bound, pos)  # (iii) ε per patch and axis, Eq. 6
        log_scale = _uniform((b, 1, 1), torch.tensor([math.log(p.max_global_scaling)]), pos)
        return (pos + shift + local) * log_scale.exp()  # (iv) λ shared by x and y, Eq. 7

    def forward(self, x: Tensor, positions: Tensor, grid: tuple[int, int]) -> Tensor:
        if not self.training:
            return super().forward(x, positions, grid)
        return x + self.embed(self.augment(positions, grid)).to(x.dtype)


def _uniform(shape: tuple[int, ...], bound: Tensor, like: Tensor) -> Tensor:
    """U(−bound, bound) samples of ``shape``; ``bound`` broadcasts over the last axis."""
    u = torch.rand(shape, device=like.device, dtype=like.dtype) * 2 - 1
    return u * bound.to(like.device, like.dtype)


VISION_POSITIONS: dict[str, type[VisionPosition]] = {
    "none": NoPosition2d,
    "learned": LearnedPosition2d,
    "sinusoidal-2d": SinusoidalPosition2d,
    "cape-2d": CapePosition2d,
}


def build_vision_position(params: VisionPositionConfig, d_model: int, train_grid: tuple[int, int]) -> VisionPosition:
    """Instantiate the method named by ``params.name`` for a model of width ``d_model``."""
    return VISION_POSITIONS[params.name](d_model, train_grid, params)
