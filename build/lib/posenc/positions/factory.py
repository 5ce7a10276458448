"""Build position modules from a :class:`PositionConfig` through the registries."""

from __future__ import annotations

from posenc.positions import registry
from posenc.positions.base import AttentionPosition, Augmentation, InputPosition
from posenc.positions.config import PositionConfig


def build_input(cfg: PositionConfig, d_model: int) -> InputPosition:
    name = cfg.methods.input
    return registry.INPUT[name].builder(d_model=d_model, params=cfg.params(name))


def build_attention(cfg: PositionConfig, d_model: int, num_layers: int, num_heads: int) -> AttentionPosition | None:
    name = cfg.methods.attention
    if name is None:
        return None
    return registry.ATTENTION[name].builder(
        d_model=d_model, params=cfg.params(name), num_layers=num_layers, num_heads=num_heads
    )


def build_augmentation(cfg: PositionConfig) -> Augmentation | None:
    name = cfg.methods.augment
    if name is None:
        return None
    return registry.AUGMENT[name].builder(params=cfg.params(name))
