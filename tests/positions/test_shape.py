"""SHAPE (Kiyono et al. 2021, §2.3): k ~ U{0..K} per sequence and step, independently per side."""

from __future__ import annotations

import pytest
import torch

from posenc.positions.base import default_positions
from posenc.positions.shape import ShapeAugmentation, ShapeParams

B, S, T = 3000, 6, 4


def masks() -> tuple[torch.Tensor, torch.Tensor]:
    src_len = torch.randint(1, S + 1, (B,))
    tgt_len = torch.randint(1, T + 1, (B,))
    return torch.arange(S)[None] < src_len[:, None], torch.arange(T)[None] < tgt_len[:, None]


def offsets(aug: ShapeAugmentation) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sequence offsets (B,) of a training-mode ``pair``; asserts they are constant per row."""
    src_mask, tgt_mask = masks()
    src_pos, tgt_pos = default_positions(src_mask), default_positions(tgt_mask)
    src_out, tgt_out = aug.pair(src_pos, src_mask, tgt_pos, tgt_mask)
    src_k, tgt_k = src_out - src_pos, tgt_out - tgt_pos
    assert torch.equal(src_k, src_k[:, :1].expand_as(src_k)), "one shift per source sequence"
    assert torch.equal(tgt_k, tgt_k[:, :1].expand_as(tgt_k)), "one shift per target sequence"
    for k in (src_k, tgt_k):
        assert torch.equal(k, k.round())  # integer shifts
    return src_k[:, 0], tgt_k[:, 0]


@pytest.mark.parametrize("exclusive", [False, True])
def test_training_offsets_cover_the_range(exclusive: bool) -> None:
    K = 3
    aug = ShapeAugmentation(ShapeParams(max_shift=K, exclusive_max=exclusive)).train()
    src_k, tgt_k = offsets(aug)
    expected = set(range(K if exclusive else K + 1))  # paper: {0..K}; public code: {0..K−1}
    assert set(src_k.long().tolist()) == expected
    assert set(tgt_k.long().tolist()) == expected
    # roughly uniform: each value has about 1/|range| of the draws
    counts = torch.bincount(src_k.long(), minlength=len(expected)).float() / B
    assert torch.all((counts - 1 / len(expected)).abs() < 0.05)


def test_source_and_target_offsets_are_independent() -> None:
    K = 3
    aug = ShapeAugmentation(ShapeParams(max_shift=K)).train()
    src_k, tgt_k = offsets(aug)
    combos = set(zip(src_k.long().tolist(), tgt_k.long().tolist()))
    assert combos == {(a, b) for a in range(K + 1) for b in range(K + 1)}  # a shared draw gives only the diagonal
    assert (src_k == tgt_k).float().mean().item() == pytest.approx(1 / (K + 1), abs=0.05)


def test_offsets_change_every_step() -> None:
    aug = ShapeAugmentation(ShapeParams(max_shift=500)).train()
    first, _ = offsets(aug)
    second, _ = offsets(aug)
    assert not torch.equal(first, second)
    assert len(set(first.long().tolist())) > 300  # varies across the sequences of a batch
    assert first.min() >= 0 and first.max() <= 500


def test_zero_max_shift_is_ape() -> None:
    aug = ShapeAugmentation(ShapeParams(max_shift=0)).train()
    src_k, tgt_k = offsets(aug)
    assert not src_k.any() and not tgt_k.any()


@pytest.mark.parametrize("offset", [0, 7])
def test_eval_uses_the_inference_offset(offset: int) -> None:
    aug = ShapeAugmentation(ShapeParams(max_shift=50, inference_offset=offset)).eval()
    src_mask, tgt_mask = masks()
    src_pos, tgt_pos = default_positions(src_mask), default_positions(tgt_mask)
    for _ in range(2):  # deterministic
        src_out, tgt_out = aug.pair(src_pos, src_mask, tgt_pos, tgt_mask)
        assert torch.equal(src_out, src_pos + offset) and torch.equal(tgt_out, tgt_pos + offset)
    assert torch.equal(aug(src_pos, src_mask), src_pos + offset)
    step = torch.full((4, 1), 3.0)
    assert torch.equal(aug.eval_target(step), step + offset)


def test_single_sequence_forward_in_training() -> None:
    aug = ShapeAugmentation(ShapeParams(max_shift=4)).train()
    mask = torch.ones(500, 5, dtype=torch.bool)
    pos = default_positions(mask)
    k = aug(pos, mask) - pos
    assert torch.equal(k, k[:, :1].expand_as(k))
    assert set(k[:, 0].long().tolist()) == set(range(5))
