"""Tests for posenc.data.batching: collate and token-bounded, DDP-aware batch sampling."""

from __future__ import annotations

import random

import pytest
import torch

from posenc.data.batching import Batch, collate, token_batches
from posenc.errors import ConfigError, DataError

PAD, BOS, EOS = 0, 2, 3


def test_collate_exact_tensors() -> None:
    b = collate([[5, 6, 7], [8]], [[9], [10, 11, 12]], PAD, BOS, EOS, indices=[4, 7])
    assert b.src.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert b.tgt_in.tolist() == [[2, 9, 0, 0], [2, 10, 11, 12]]
    assert b.tgt_out.tolist() == [[9, 3, 0, 0], [10, 11, 12, 3]]
    assert b.src_mask.tolist() == [[True, True, True], [True, False, False]]
    assert b.tgt_mask.tolist() == [[True, True, False, False], [True, True, True, True]]
    assert b.ntokens == 6 and b.indices == [4, 7] and len(b) == 2
    assert b.src.dtype == b.tgt_in.dtype == b.tgt_out.dtype == torch.long
    assert b.src_mask.dtype == b.tgt_mask.dtype == torch.bool


def test_collate_src_bos_and_empty_target() -> None:
    b = collate([[5]], [[]], PAD, BOS, EOS, indices=[0], prepend_src_bos=True)
    assert b.src.tolist() == [[2, 5]] and b.tgt_in.tolist() == [[2]] and b.tgt_out.tolist() == [[3]]
    assert b.ntokens == 1


def test_collate_errors() -> None:
    with pytest.raises(DataError, match="example 9: empty source sequence"):
        collate([[5], []], [[1], [1]], PAD, BOS, EOS, indices=[8, 9])
    with pytest.raises(ValueError, match="2 sources, 1 targets, 2 indices"):
        collate([[5], [6]], [[1]], PAD, BOS, EOS, indices=[0, 1])


def test_batch_to_device() -> None:
    b = collate([[5, 6]], [[7]], PAD, BOS, EOS, indices=[3])
    moved = b.to("cpu")
    assert isinstance(moved, Batch) and moved is not b
    assert torch.equal(moved.tgt_out, b.tgt_out) and moved.indices == [3] and moved.ntokens == 2


def test_token_batches_exact_packing() -> None:
    # padded size = max(src, tgt); sorted: 1 (1), 2 (2), 0 (3), 3 (5 > max_tokens: alone)
    assert token_batches([3, 1, 2, 5], [1, 1, 1, 1], 4, shuffle=False, seed=0, epoch=0) == [[1, 2], [0], [3]]
    assert token_batches([1, 1, 1], [1, 3, 1], 6, shuffle=False, seed=0, epoch=0) == [[0, 2], [1]]
    assert token_batches([], [], 10, shuffle=True, seed=0, epoch=0) == []


def _random_lengths(n: int, seed: int = 0) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    return [rng.randint(1, 40) for _ in range(n)], [rng.randint(1, 40) for _ in range(n)]


def test_token_batches_cover_everything_within_budget() -> None:
    src, tgt = _random_lengths(500)
    src[7] = 300  # longer than max_tokens
    for shuffle in (False, True):
        batches = token_batches(src, tgt, 256, shuffle=shuffle, seed=3, epoch=1)
        assert sorted(i for b in batches for i in b) == list(range(500))
        assert [7] in batches
        for b in batches:
            if b != [7]:
                assert len(b) * max(max(src[i], tgt[i]) for i in b) <= 256


def test_token_batches_deterministic_per_seed_and_epoch() -> None:
    src, tgt = _random_lengths(300)
    first = token_batches(src, tgt, 200, shuffle=True, seed=1, epoch=0)
    assert first == token_batches(src, tgt, 200, shuffle=True, seed=1, epoch=0)
    assert first != token_batches(src, tgt, 200, shuffle=True, seed=1, epoch=1)
    assert first != token_batches(src, tgt, 200, shuffle=True, seed=2, epoch=0)
    ordered = token_batches(src, tgt, 200, shuffle=False, seed=1, epoch=0)
    assert ordered == token_batches(src, tgt, 200, shuffle=False, seed=9, epoch=5)
    sizes = [max(src[i], tgt[i]) for b in ordered for i in b]
    assert sizes == sorted(sizes)


def test_token_batches_ddp_ranks() -> None:
    src, tgt = _random_lengths(400)
    full = token_batches(src, tgt, 150, shuffle=True, seed=0, epoch=2)
    ranks = [token_batches(src, tgt, 150, shuffle=True, seed=0, epoch=2, rank=r, world_size=3)
             for r in range(3)]
    assert len({len(r) for r in ranks}) == 1 and len(ranks[0]) == len(full) // 3
    seen = [i for r in ranks for b in r for i in b]
    assert len(seen) == len(set(seen))  # ranks are disjoint
    usable = full[: len(full) - len(full) % 3]
    assert [ranks[r] for r in range(3)] == [usable[r::3] for r in range(3)]


def test_token_batches_errors() -> None:
    with pytest.raises(DataError, match="only 1 batches for 2 ranks"):
        token_batches([1], [1], 10, shuffle=False, seed=0, epoch=0, rank=0, world_size=2)
    with pytest.raises(ConfigError, match="0 <= rank < world_size"):
        token_batches([1], [1], 10, shuffle=False, seed=0, epoch=0, rank=2, world_size=2)
    with pytest.raises(ConfigError, match="max_tokens must be >= 1"):
        token_batches([1], [1], 0, shuffle=False, seed=0, epoch=0)
    with pytest.raises(ValueError, match="2 source lengths, 1 target lengths"):
        token_batches([1, 2], [1], 10, shuffle=False, seed=0, epoch=0)
