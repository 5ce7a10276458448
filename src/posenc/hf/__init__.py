"""Hugging Face integration: SHAPE, CAPE and randomized positions through ``position_ids``.

Needs the ``hf`` extra (``pip install posenc[hf]``); see docs/hf.md.
"""

from posenc.hf.augment import PositionSampler, base_positions, build_augmentation
from posenc.hf.families import FAMILIES, Family, PositionInterface, inspect_model
from posenc.hf.seq2seq import PositionAugmentedSeq2Seq
from posenc.hf.wrapper import PositionAugmentedModel, PositionIdsCollator, augment_model

__all__ = [
    "FAMILIES",
    "Family",
    "PositionAugmentedModel",
    "PositionAugmentedSeq2Seq",
    "PositionIdsCollator",
    "PositionInterface",
    "PositionSampler",
    "augment_model",
    "base_positions",
    "build_augmentation",
    "inspect_model",
]
