"""Vision Transformer classifier (Dosovitskiy et al. 2020; DeiT) with 2-D position methods.

Shape legend: B batch, C image channels, H/W image height/width, P patch size,
gh = H/P and gw = W/P patch-grid height/width, N = gh·gw patches, L = N + 1 tokens (CLS first),
D model width, V number of classes.

Architecture: Conv2d patch embedding (kernel = stride = P) → + 2-D position (CAPE §5.1; the
registered 2-D methods of ``posenc.positions``: ``sinusoidal-2d``, ``learned-2d``, ``cape-2d``,
or ``none``) → prepend CLS token → the translation models' pre-LN :class:`Encoder` stack (GELU)
with its final LayerNorm → linear head on the CLS token. Any H, W divisible by P is accepted:
the position method adapts to the patch grid (learned tables by bicubic interpolation,
sinpos/CAPE by continuous coordinates). Positions are the mean-normalised patch centres
(CAPE §4 step i), ``(B, N, 2)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from posenc.config import require
from posenc.errors import DataError
from posenc.models.config import ModelConfig
from posenc.models.transformer import Encoder
from posenc.positions import PositionConfig, build_augmentation, build_input, default_positions, registry
from posenc.positions.grid2d import mean_normalize_2d, patch_centres


def vision_positions(name: str = "cape-2d") -> PositionConfig:
    """The position config of a ViT with the registered defaults.

    Args:
        name: the 2-D position setting (``cape-2d``, ``sinusoidal-2d``, ``learned-2d``, ``none``).

    Returns:
        The position config.
    """
    return PositionConfig(name=name)


@dataclass
class ViTConfig:
    """The ViT classifier of a vision run (its ``model`` section).

    Args:
        image_size: training resolution (sets the learned table's grid), divisible by ``patch``.
        channels: image channels C.
        patch: patch size P.
        d_model: model width D, even.
        heads: attention heads (D divisible by them).
        layers: Transformer layers.
        d_ff: feed-forward hidden width.
        dropout: dropout of the layers and attention weights.
        num_classes: classes V.
        position: the 2-D position methods (no attention-level method).

    Raises:
        ConfigError: a value out of range or a position method that is not 2-D.
    """

    image_size: int = 28  # training resolution (sets the learned table's grid)
    channels: int = 1
    patch: int = 4
    d_model: int = 64
    heads: int = 4
    layers: int = 4
    d_ff: int = 128
    dropout: float = 0.0
    num_classes: int = 10
    position: PositionConfig = field(default_factory=vision_positions)

    def __post_init__(self) -> None:
        require(self.patch >= 1, f"model.patch must be >= 1, got {self.patch}")
        require(self.image_size % self.patch == 0,
                f"model.image_size {self.image_size} is not divisible by model.patch {self.patch}")
        require(self.channels >= 1 and self.num_classes >= 2, "model.channels must be >= 1 and model.num_classes >= 2")
        require(self.d_model % self.heads == 0,
                f"model.d_model {self.d_model} is not divisible by model.heads {self.heads}")
        require(self.d_model % 2 == 0, f"model.d_model must be even, got {self.d_model}")
        require(self.layers >= 1 and self.d_ff >= 1, "model.layers and model.d_ff must be >= 1")
        require(0.0 <= self.dropout < 1.0, f"model.dropout must be in [0, 1), got {self.dropout}")
        methods = self.position.methods
        builder = registry.INPUT[methods.input].builder
        require(methods.attention is None and (getattr(builder, "position_dims", 1) == 2 or not builder.uses_positions),
                f"model.position {self.position.name!r} is not a 2-D method (sinusoidal-2d, learned-2d, cape-2d, none)")
        grid = self.image_size // self.patch
        self.position.learned2d.grid = [grid, grid]  # resolved: the learned table covers the training grid

    def encoder_config(self) -> ModelConfig:
        """The encoder stack's config: pre-LN, GELU, attention dropout = dropout, no 1-D positions.

        Returns:
            A model config whose encoder stack is the ViT's Transformer.
        """
        return ModelConfig(
            encoder_layers=self.layers, decoder_layers=1, d_model=self.d_model, heads=self.heads, d_ff=self.d_ff,
            dropout=self.dropout, attention_dropout=self.dropout, activation="gelu", norm="pre",
            position=PositionConfig(name="none"),
        )


class ViT(nn.Module):
    """Vision Transformer classifier with a 2-D position method and a CLS token.

    Args:
        cfg: the ViT config.
    """

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.patch_embed = nn.Conv2d(cfg.channels, cfg.d_model, kernel_size=cfg.patch, stride=cfg.patch)
        self.cls_token = nn.Parameter(torch.zeros(cfg.d_model))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.position = build_input(cfg.position, cfg.d_model)
        self.augment = build_augmentation(cfg.position)
        self.encoder = Encoder(cfg.encoder_config())
        self.head = nn.Linear(cfg.d_model, cfg.num_classes)

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """The patch grid of an image size.

        Args:
            height: image height H.
            width: image width W.

        Returns:
            ``(gh, gw)`` = ``(H/P, W/P)``.

        Raises:
            DataError: H or W not divisible by P.
        """
        p = self.cfg.patch
        if height % p or width % p:
            raise DataError(f"image size {height}x{width} is not divisible by patch size {p}")
        return height // p, width // p

    def embed(self, images: Tensor) -> Tensor:
        """Patch-embed images and add their (augmented) 2-D positions; prepend the CLS token.

        Args:
            images: float images ``(B, C, H, W)``.

        Returns:
            Tokens ``(B, L, D)``, CLS first.

        Raises:
            DataError: a shape other than ``(B, C, H, W)`` with H, W divisible by P.
        """
        if images.dim() != 4 or images.shape[1] != self.cfg.channels:
            raise DataError(f"expected images (B, {self.cfg.channels}, H, W), got shape {tuple(images.shape)}")
        gh, gw = self.grid(images.shape[2], images.shape[3])
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, N, D), row-major patches
        positions = mean_normalize_2d(patch_centres(gh, gw, x.device).expand(x.shape[0], -1, -1))  # (B, N, 2)
        mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        positions = self.augment(positions, mask)
        x = self.position(x, positions, mask, {"grid": (gh, gw)})  # the grid: nothing read back from the device
        cls = self.cls_token
        cls_pos = self.position.cls_position() if hasattr(self.position, "cls_position") else None
        if cls_pos is not None:
            cls = cls + cls_pos
        return torch.cat((cls.expand(x.shape[0], 1, -1), x), dim=1)

    def forward(self, images: Tensor) -> Tensor:
        """Classify images.

        Args:
            images: float images ``(B, C, H, W)``.

        Returns:
            Class logits ``(B, V)``.
        """
        x = self.embed(images)
        mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)  # every token visible
        h = self.encoder(x, default_positions(mask), mask)  # (B, L, D), final LayerNorm applied
        return self.head(h[:, 0])
