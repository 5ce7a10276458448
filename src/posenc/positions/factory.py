"""Build position modules from a :class:`PositionConfig` through the registries."""

from __future__ import annotations

from posenc.positions import registry
from posenc.positions.base import AttentionPosition, Augmentation, InputPosition, NullAttention, NullAugmentation
from posenc.positions.config import PositionConfig


def build_input(cfg: PositionConfig, d_model: int) -> InputPosition:
    name = cfg.methods.input
    return registry.INPUT[name].builder(d_model=d_model, params=cfg.params(name))


def build_attention(
    cfg: PositionConfig, d_model: int, num_layers: int, num_heads: int, causal: bool = False
) -> AttentionPosition:
    """``causal``: the stack's self-attention is causal (methods with a causal form use it);
    the null method (no score term, value term or q/k transform) when the setting has none."""
    name = cfg.methods.attention
    if name is None:
        return NullAttention()
    return registry.ATTENTION[name].builder(
        d_model=d_model, params=cfg.params(name), num_layers=num_layers, num_heads=num_heads, causal=causal
    )


def build_augmentation(cfg: PositionConfig) -> Augmentation:
    """The setting's augmentation, or the identity (:class:`NullAugmentation`) when it has none."""
    name = cfg.methods.augment
    if name is None:
        return NullAugmentation()
    return registry.AUGMENT[name].builder(params=cfg.params(name))
