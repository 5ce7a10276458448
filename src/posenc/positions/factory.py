"""Build position modules from a :class:`PositionConfig` through the registries."""

from __future__ import annotations

from posenc.positions import registry
from posenc.positions.base import AttentionPosition, Augmentation, InputPosition, NullAttention, NullAugmentation
from posenc.positions.config import PositionConfig


def build_input(cfg: PositionConfig, d_model: int) -> InputPosition:
    """The setting's input method.

    Args:
        cfg: the position setting (``name`` and one options block per method).
        d_model: model width D.

    Returns:
        The input method module (``none``'s when the setting names no input method).
    """
    name = cfg.methods.input
    return registry.INPUT[name].builder(d_model=d_model, params=cfg.params(name))


def build_attention(
    cfg: PositionConfig, d_model: int, num_layers: int, num_heads: int, causal: bool = False
) -> AttentionPosition:
    """The setting's attention method for one stack of self-attention layers.

    Args:
        cfg: the position setting.
        d_model: model width D.
        num_layers: self-attention layers of the stack.
        num_heads: heads per layer.
        causal: the stack's self-attention is causal (methods with a causal form use it).

    Returns:
        The attention method, or the null method (no score term, value term or q/k transform)
        when the setting has none.

    Raises:
        ConfigError: a causal-only method (CoPE, FIRE, xPos) in a bidirectional stack.
    """
    name = cfg.methods.attention
    if name is None:
        return NullAttention()
    return registry.ATTENTION[name].builder(
        d_model=d_model, params=cfg.params(name), num_layers=num_layers, num_heads=num_heads, causal=causal
    )


def build_augmentation(cfg: PositionConfig) -> Augmentation:
    """The setting's augmentation.

    Args:
        cfg: the position setting.

    Returns:
        The augmentation, or the identity (:class:`NullAugmentation`) when the setting has none.
    """
    name = cfg.methods.augment
    if name is None:
        return NullAugmentation()
    return registry.AUGMENT[name].builder(params=cfg.params(name))
