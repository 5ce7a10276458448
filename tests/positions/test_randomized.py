"""Randomized positional encodings (Ruoss et al. 2023): sorted distinct subsets, eval identity."""

from __future__ import annotations

import pytest
import torch

from posenc.errors import ConfigError, DataError
from posenc.positions import PositionConfig, build_augmentation, default_positions, resolve
from posenc.positions.randomized import RandomizedParams


def augmentation(max_len: int) -> torch.nn.Module:
    return build_augmentation(PositionConfig(name="ape+randomized", randomized=RandomizedParams(max_len)))


def test_training_positions_are_sorted_distinct_and_in_range() -> None:
    aug, mask = augmentation(12).train(), torch.ones(64, 10, dtype=torch.bool)
    pos = aug(default_positions(mask), mask)
    assert pos.shape == (64, 10) and (pos[:, 1:] > pos[:, :-1]).all()  # strictly increasing
    assert pos.min() >= 0 and pos.max() <= 11 and torch.equal(pos, pos.round())
    assert not torch.equal(pos, default_positions(mask))  # 64 draws: identity has tiny probability


def test_full_range_subset_is_the_identity_and_eval_is_identity() -> None:
    mask = torch.ones(3, 5, dtype=torch.bool)
    assert torch.equal(augmentation(5).train()(default_positions(mask), mask), default_positions(mask))
    aug = augmentation(100).eval()
    assert torch.equal(aug(default_positions(mask), mask), default_positions(mask))
    assert torch.equal(aug.eval_target(torch.full((3, 1), 7.0)), torch.full((3, 1), 7.0))


def test_seeded_draws_repeat() -> None:
    aug, mask = augmentation(50).train(), torch.ones(4, 6, dtype=torch.bool)
    torch.manual_seed(3)
    a = aug(default_positions(mask), mask)
    torch.manual_seed(3)
    assert torch.equal(a, aug(default_positions(mask), mask))


def test_too_long_sequence_and_bad_combinations_are_one_line_errors() -> None:
    mask = torch.ones(1, 9, dtype=torch.bool)
    with pytest.raises(DataError, match="randomized.max_len 8"):
        augmentation(8).train()(default_positions(mask), mask)
    for ok in ("rope+randomized", "rpe+randomized", "alibi+randomized", "t5+randomized"):
        assert resolve(ok).augment == "randomized"
    for bad in ("rnn+randomized", "nopos+randomized"):
        with pytest.raises(ConfigError, match="needs input method"):
            resolve(bad)
