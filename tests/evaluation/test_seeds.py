"""Welch's t-test across seeds (posenc.evaluation.seeds)."""

from __future__ import annotations

import math

import pytest

from posenc.evaluation.seeds import seed_test


def test_welch_by_hand() -> None:
    """a = [1, 2, 3], b = [1.5, 2.5, 4]: var 1 and 1.5833, SE² = 0.8611, t = −0.6667 / 0.92796,
    df = SE⁴ / ((1/3)² / 2 + (0.52778)² / 2) = 3.806; the two-sided p of t(3.806)."""
    r = seed_test([1, 2, 3], [1.5, 2.5, 4.0])
    se = math.sqrt(1 / 3 + 1.5833333333333333 / 3)
    assert r.diff == pytest.approx(-2 / 3) and r.t == pytest.approx(-(2 / 3) / se)
    assert r.df == pytest.approx(se ** 4 / ((1 / 3) ** 2 / 2 + (1.5833333333333333 / 3) ** 2 / 2))
    assert r.p == pytest.approx(0.5141, abs=1e-4)
    # 95 % interval: diff ± t_{0.975}(3.806) · SE; t_{0.975}(3.806) = 2.8332 (tables: 2.776 at 4 dof, 3.182 at 3)
    assert (r.low, r.high) == pytest.approx((-2 / 3 - 2.8332 * se, -2 / 3 + 2.8332 * se), abs=1e-3)
    assert seed_test([1, 2, 3], [1, 2, 3]).p == pytest.approx(1.0)


def test_one_sided_p_halves_the_two_sided_p_in_the_direction_of_t() -> None:
    """t < 0 (a below b): "a < b" has half the two-sided p, "a > b" the rest; swapping the systems
    swaps the two."""
    r, swapped = seed_test([1, 2, 3], [1.5, 2.5, 4.0]), seed_test([1.5, 2.5, 4.0], [1, 2, 3])
    assert r.p_below == pytest.approx(0.5141 / 2, abs=1e-4) and r.p_above == pytest.approx(1 - 0.5141 / 2, abs=1e-4)
    assert (swapped.p_above, swapped.p_below) == pytest.approx((r.p_below, r.p_above))


def test_needs_two_seeds_each() -> None:
    with pytest.raises(ValueError, match=">= 2 seeds"):
        seed_test([1.0], [1.0, 2.0])
