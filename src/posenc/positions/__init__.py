"""Position methods behind one interface (see ``base``), chosen by name (see ``config``)."""

from posenc.positions.base import (
    AttentionHook,
    AttentionPosition,
    Augmentation,
    InputPosition,
    default_positions,
)
from posenc.positions.config import Methods, PositionConfig, resolve
from posenc.positions.factory import build_attention, build_augmentation, build_input

__all__ = [
    "AttentionHook",
    "AttentionPosition",
    "Augmentation",
    "InputPosition",
    "Methods",
    "PositionConfig",
    "build_attention",
    "build_augmentation",
    "build_input",
    "default_positions",
    "resolve",
]
