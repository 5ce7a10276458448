"""Tests for posenc.data.settings: EXTRAPOLATE, INTERPOLATE, length-controlled splits, stacking."""

from __future__ import annotations

import pytest

from posenc.data.corpora import Pair
from posenc.data.settings import extrapolate, in_range, interpolate, length_controlled, split_by_bounds, stack
from posenc.errors import ConfigError, DataError


def words(text: str) -> int:
    return len(text.split())


def _w(n: int, tag: str = "w") -> str:
    return " ".join([tag] * n)


def test_extrapolate_drops_pairs_longer_than_max_len() -> None:
    pairs = [Pair(_w(3), _w(3)), Pair(_w(4), _w(2)), Pair(_w(2), _w(4)), Pair(_w(1), _w(1))]
    assert extrapolate(pairs, 3, length_fn=words) == [pairs[0], pairs[3]]
    assert extrapolate(pairs, 4, length_fn=words) == pairs
    with pytest.raises(ConfigError, match="max_len must be >= 1"):
        extrapolate(pairs, 0, length_fn=words)


def test_interpolate_groups_within_documents() -> None:
    pairs = [
        Pair("a2", "A2", "d1", 2), Pair("b1", "B1", "d2", 1), Pair("a1", "A1", "d1", 1),
        Pair("a3", "A3", "d1", 3), Pair("a4", "A4", "d1", 4), Pair("a5", "A5", "d1", 5),
        Pair("b2", "B2", "d2", 2),
    ]
    assert interpolate(pairs, group=2) == [
        Pair("a1 <sep> a2", "A1 <sep> A2", "d1", 1),
        Pair("a3 <sep> a4", "A3 <sep> A4", "d1", 3),
        Pair("a5", "A5", "d1", 5),  # the shorter run at the document's end is kept (SHAPE keeps all data)
        Pair("b1 <sep> b2", "B1 <sep> B2", "d2", 1),
    ]
    assert interpolate(pairs, group=3, sep=" | ") == [
        Pair("a1 | a2 | a3", "A1 | A2 | A3", "d1", 1), Pair("a4 | a5", "A4 | A5", "d1", 4), Pair("b1 | b2", "B1 | B2", "d2", 1)]
    with pytest.raises(ConfigError, match="group must be >= 1"):
        interpolate(pairs, group=0)


def test_length_controlled_equal_token_shares() -> None:
    pairs = [Pair(_w(n), f"t{n}", "d", n) for n in [10, 1, 2, 9, 3, 4, 5, 6, 7, 8]]
    splits, bounds = length_controlled(pairs, length_fn=words)
    assert {k: [p.tgt for p in v] for k, v in splits.items()} == {
        "short": ["t1", "t2", "t3", "t4", "t5", "t6"],  # corpus order kept
        "middle": ["t7", "t8"],
        "long": ["t10", "t9"],
    }
    assert bounds == [(1, 6), (7, 8), (9, 10)]
    assert [sum(words(p.src) for p in v) for v in splits.values()] == [21, 15, 19]


def test_length_controlled_ties_straddle_boundaries() -> None:
    pairs = [Pair(_w(2), str(i)) for i in range(6)]
    splits, bounds = length_controlled(pairs, length_fn=words)
    assert [[p.tgt for p in v] for v in splits.values()] == [["0", "1"], ["2", "3"], ["4", "5"]]
    assert bounds == [(2, 2), (2, 2), (2, 2)]
    two, bounds2 = length_controlled(pairs[:3], 2, length_fn=words)
    assert list(two) == ["split0", "split1"] and bounds2 == [(2, 2), (2, 2)]
    with pytest.raises(DataError, match="cannot split 2 pairs into 3 length ranges"):
        length_controlled(pairs[:2], length_fn=words)


def test_split_by_bounds() -> None:
    pairs = [Pair(_w(n), str(n)) for n in [1, 6, 7, 8, 9, 12, 24, 26]]
    out = split_by_bounds(pairs, [(2, 8), (8, 11), (11, 20)], length_fn=words)
    assert {k: [p.tgt for p in v] for k, v in out.items()} == {
        "short": ["1", "6", "7", "8"],  # shorter than the first min goes first; shared 8 goes lower
        "middle": ["9"],
        "long": ["12", "24", "26"],  # longer than the last max goes last
    }


def test_stack_joins_until_enough_target_tokens() -> None:
    pairs = [
        Pair("Ein Hund.", "A dog.", "d", 1),
        Pair('"Zwei Katzen."', "Two cats.", "d", 2),
        Pair("Drei.", "Three birds fly...", "e", 1),
        Pair("Vier.", "Four.", "e", 2),
        Pair("Fünf.", "Five.", "e", 3),
    ]
    assert stack(pairs, 4, length_fn=words) == [
        Pair('Ein Hund, "zwei Katzen."', "A dog, two cats.", "d", 1),
        Pair("Drei, vier.", "Three birds fly.., four.", "e", 1),  # "Five." left over: dropped
    ]
    assert stack(pairs, 100, length_fn=words) == []
    with pytest.raises(ConfigError, match="min_target_tokens must be >= 1"):
        stack(pairs, 0, length_fn=words)


def test_interpolate_keeps_every_sentence() -> None:
    """SHAPE Table 3: 4.5M VANILLA pairs → 450K INTERPOLATE pairs, i.e. nothing dropped; documents
    whose size is not a multiple of ten used to lose their tail (16.7 % of the Bible)."""
    pairs = [Pair(f"s{d}.{i}", f"t{d}.{i}", f"doc{d}", i) for d, n in enumerate((23, 10, 7, 31)) for i in range(n)]
    joined = interpolate(pairs, group=10)
    assert sum(p.src.count(" <sep> ") + 1 for p in joined) == len(pairs)
    assert [p.src for p in pairs] == [s for p in joined for s in p.src.split(" <sep> ")]  # order kept
    assert [p.tgt for p in pairs] == [t for p in joined for t in p.tgt.split(" <sep> ")]
    assert len(joined) == 3 + 1 + 1 + 4


def test_in_range_is_the_extrapolate_filter() -> None:
    src, tgt = [3, 4, 2, 1, 5], [3, 2, 4, 1, 1]
    assert in_range(src, tgt, 3) == [0, 3]
    pairs = [Pair(_w(s), _w(t)) for s, t in zip(src, tgt)]
    assert extrapolate(pairs, 3, length_fn=words) == [pairs[i] for i in in_range(src, tgt, 3)]
    with pytest.raises(ConfigError, match="max_len must be >= 1"):
        in_range(src, tgt, 0)


def test_in_range_with_a_length_split_range() -> None:
    """A Long training split (sources 5-7) stops on validation sources 5-7 only, still <= max_len."""
    src, tgt = [3, 5, 7, 8, 6, 6], [3, 5, 7, 8, 9, 2]
    assert in_range(src, tgt, 8, src_bounds=(5, 7)) == [1, 2, 5]  # 6→9 target is beyond max_len
    assert in_range(src, tgt, 6, src_bounds=(5, 7)) == [1, 5]  # max_len still caps the source
