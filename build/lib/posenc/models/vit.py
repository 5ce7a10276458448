"""Vision Transformer classifier (Dosovitskiy et al. 2020; DeiT) with 2-D position methods.

Shape legend: B batch, C image channels, H/W image height/width, P patch size,
gh = H/P and gw = W/P patch-grid height/width, N = gh·gw patches, L = N + 1 tokens (CLS first),
D model width, V number of classes.

Architecture: Conv2d patch embedding (kernel = stride = P) → + 2-D position (CAPE §5.1; see
``posenc.positions.vision``) → prepend CLS token → pre-LN encoder layers → final LayerNorm →
linear head on the CLS token. Any H, W divisible by P is accepted: the position method adapts
to the patch grid (learned tables by bicubic interpolation, sinpos/CAPE by continuous
coordinates).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from posenc.config import require
from posenc.errors import DataError
from posenc.models.attention import attention_bias
from posenc.models.layers import EncoderLayer
from posenc.positions.vision import VisionPositionConfig, build_vision_position, patch_centres


@dataclass
class ViTConfig:
    image_size: int = 28  # training resolution (sets the learned table's grid)
    channels: int = 1
    patch: int = 4
    d_model: int = 64
    heads: int = 4
    layers: int = 4
    d_ff: int = 128
    dropout: float = 0.0
    num_classes: int = 10
    position: VisionPositionConfig = field(default_factory=VisionPositionConfig)

    def __post_init__(self) -> None:
        require(self.patch >= 1, f"model.patch must be >= 1, got {self.patch}")
        require(self.image_size % self.patch == 0, f"model.image_size {self.image_size} is not divisible by model.patch {self.patch}")
        require(self.channels >= 1 and self.num_classes >= 2, "model.channels must be >= 1 and model.num_classes >= 2")
        require(self.d_model % self.heads == 0, f"model.d_model {self.d_model} is not divisible by model.heads {self.heads}")
        require(self.d_model % 2 == 0, f"model.d_model must be even, got {self.d_model}")
        require(self.layers >= 1 and self.d_ff >= 1, "model.layers and model.d_ff must be >= 1")
        require(0.0 <= self.dropout < 1.0, f"model.dropout must be in [0, 1), got {self.dropout}")


class ViT(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        grid = cfg.image_size // cfg.patch
        self.patch_embed = nn.Conv2d(cfg.channels, cfg.d_model, kernel_size=cfg.patch, stride=cfg.patch)
        self.cls_token = nn.Parameter(torch.zeros(cfg.d_model))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.position = build_vision_position(cfg.position, cfg.d_model, (grid, grid))
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout, cfg.dropout, pre_norm=True, activation="gelu")
            for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.num_classes)

    def grid(self, height: int, width: int) -> tuple[int, int]:
        p = self.cfg.patch
        if height % p or width % p:
            raise DataError(f"image size {height}x{width} is not divisible by patch size {p}")
        return height // p, width // p

    def embed(self, images: Tensor) -> Tensor:
        """images ``(B, C, H, W)`` float → tokens ``(B, L, D)`` (CLS first, positions added)."""
        if images.dim() != 4 or images.shape[1] != self.cfg.channels:
            raise DataError(f"expected images (B, {self.cfg.channels}, H, W), got shape {tuple(images.shape)}")
        gh, gw = self.grid(images.shape[2], images.shape[3])
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, N, D), row-major patches
        positions = patch_centres(gh, gw, x.device).expand(x.shape[0], -1, -1)  # (B, N, 2)
        x = self.position(x, positions, (gh, gw))
        cls = self.cls_token
        cls_pos = self.position.cls_position()
        if cls_pos is not None:
            cls = cls + cls_pos
        return torch.cat((cls.expand(x.shape[0], 1, -1), x), dim=1)

    def forward(self, images: Tensor) -> Tensor:
        """images ``(B, C, H, W)`` → logits ``(B, V)``."""
        x = self.drop(self.embed(images))
        mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        allowed = attention_bias(mask, x.shape[1], causal=False)  # (B, 1, 1, L): every token visible
        for layer in self.layers:
            x = layer(x, allowed, None, None)
        return self.head(self.norm(x[:, 0]))
