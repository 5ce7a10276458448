"""A test across seeds: is one system's mean score over training seeds above another's?

The paired bootstrap (:mod:`posenc.evaluation.bootstrap`) resamples test sentences and so measures
test-set noise; with several seeds per system the training noise shows in the spread of the
per-seed scores. :func:`seed_test` is Welch's t-test (unequal variances) on those scores, via
``scipy.stats.ttest_ind``, as the comparison across seeds that the SHAPE question asks.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats


@dataclass(frozen=True)
class SeedTest:
    """The result of :func:`seed_test`.

    Args:
        diff: ``mean(a) − mean(b)``.
        t: Welch's t statistic.
        df: its degrees of freedom.
        p: the two-sided p-value.
        low: lower end of the 95 % confidence interval of the difference.
        high: its upper end.
    """

    diff: float
    t: float
    df: float
    p: float
    low: float = math.nan
    high: float = math.nan

    @property
    def p_above(self) -> float:
        """One-sided p of "mean(a) > mean(b)" (half the two-sided p when t points that way)."""
        return self.p / 2 if self.t > 0 else 1 - self.p / 2

    @property
    def p_below(self) -> float:
        """One-sided p of "mean(a) < mean(b)"."""
        return self.p / 2 if self.t < 0 else 1 - self.p / 2


def mean_std(values: Sequence[float], digits: int = 2, scale: float = 1.0) -> str:
    """``mean ± std`` of per-seed ``values`` times ``scale`` (sample std), with ``digits``
    decimals; the mean alone for one value: the cell every report table shows for a method.

    Args:
        values: per-seed scores (at least one).
        digits: decimals shown.
        scale: multiplies the values (100 for accuracies as percentages).

    Returns:
        ``"mean ± std"``, or ``"mean"`` for one value.
    """
    mean = scale * statistics.mean(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {scale * statistics.stdev(values):.{digits}f}"


def seed_test(a: Sequence[float], b: Sequence[float]) -> SeedTest:
    """Welch's two-sided t-test of per-seed scores ``a`` vs ``b``.

    Args:
        a: system A's per-seed scores (at least 2).
        b: system B's (at least 2).

    Returns:
        The difference, t, df, p and the 95 % interval.

    Raises:
        ValueError: fewer than 2 seeds on a side.
    """
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"seed_test needs >= 2 seeds per system, got {len(a)} and {len(b)}")
    res = stats.ttest_ind(list(a), list(b), equal_var=False)
    diff = statistics.fmean(a) - statistics.fmean(b)
    # Welch's interval: diff ± t_{0.975, df} · sqrt(var(a)/n_a + var(b)/n_b)
    half = float(stats.t.ppf(0.975, res.df)) * math.sqrt(statistics.variance(a) / len(a) +
                                                         statistics.variance(b) / len(b))
    return SeedTest(diff, float(res.statistic), float(res.df), float(res.pvalue), diff - half, diff + half)
