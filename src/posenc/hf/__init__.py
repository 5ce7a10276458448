"""Hugging Face integration: SHAPE, CAPE and randomized positions through ``position_ids``.

Needs the ``hf`` extra (``pip install posenc[hf]``); see docs/hf.md.
"""

from posenc.hf.augment import INTEGER_VALUED, PositionSampler, base_positions, build_augmentation
from posenc.hf.families import FAMILIES, Family, PositionInterface, inspect_model
from posenc.hf.wrapper import PositionAugmentedModel, PositionIdsCollator

__all__ = [
    "FAMILIES",
    "INTEGER_VALUED",
    "Family",
    "PositionAugmentedModel",
    "PositionIdsCollator",
    "PositionInterface",
    "PositionSampler",
    "base_positions",
    "build_augmentation",
    "inspect_model",
]
