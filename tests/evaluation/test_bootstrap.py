"""Paired bootstrap: exact sacreBLEU agreement of summed statistics, decisive and tied cases."""

from __future__ import annotations

import random

import numpy as np
import pytest
import sacrebleu
from sacrebleu.metrics import BLEU

from posenc.errors import ConfigError, DataError
from posenc.evaluation import bleu_from_statistics, bleu_statistics, paired_bootstrap
from posenc.evaluation.bootstrap import _resampled_sums

WORDS = "the a cat dog sat on mat ran , . quickly big small red it is was".split()


def corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 20))).capitalize() for _ in range(n)]


def corrupt(lines: list[str], p: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = [w if rng.random() > p else rng.choice(WORDS) for w in line.split()]
        if rng.random() < p:
            words = words[: max(0, len(words) - 2)]
        out.append(" ".join(words))
    return out


REFS = corpus(200, 0)
SYS_A = corrupt(REFS, 0.15, 1)
SYS_B = corrupt(REFS, 0.35, 2)


def test_summed_statistics_reproduce_sacrebleu_exactly() -> None:
    for hyps in (SYS_A, SYS_B, REFS, [""] * len(REFS), SYS_A[:3]):
        refs = REFS[: len(hyps)]
        stats = bleu_statistics(hyps, refs)
        assert stats.shape == (len(hyps), 10)
        assert bleu_from_statistics(stats.sum(0)) == sacrebleu.corpus_bleu(hyps, [refs]).score
        # sacreBLEU's own (private) per-sentence statistics serve as the oracle here.
        assert stats.tolist() == BLEU()._extract_corpus_statistics(hyps, [refs])


def test_reference_copy_beats_garbage() -> None:
    garbage = corrupt(REFS, 0.9, 3)
    res = paired_bootstrap(REFS, garbage, REFS, n_samples=300)
    assert res["bleu_a"] == pytest.approx(100.0) and res["p_value"] == 0.0
    assert res["wins_a"] == 300 and res["wins_b"] == 0
    assert res["ci_a"] == pytest.approx((100.0, 100.0))
    assert paired_bootstrap(garbage, REFS, REFS, n_samples=300)["p_value"] == 1.0


def test_better_system_wins_and_statistics_are_consistent() -> None:
    res = paired_bootstrap(SYS_A, SYS_B, REFS, n_samples=500)
    assert res["bleu_a"] == sacrebleu.corpus_bleu(SYS_A, [REFS]).score
    assert res["bleu_b"] == sacrebleu.corpus_bleu(SYS_B, [REFS]).score
    assert res["bleu_a"] > res["bleu_b"] and res["p_value"] < 0.05
    for s in "ab":
        lo, hi = res[f"ci_{s}"]
        assert lo < res[f"mean_{s}"] < hi and lo < res[f"bleu_{s}"] < hi
    rev = paired_bootstrap(SYS_B, SYS_A, REFS, n_samples=500)  # same seed → same resamples
    assert (rev["wins_a"], rev["wins_b"]) == (res["wins_b"], res["wins_a"])
    assert res["p_value"] + rev["p_value"] == pytest.approx(1 + res["ties"] / 500)


def test_identical_systems_tie_everywhere() -> None:
    res = paired_bootstrap(SYS_A, list(SYS_A), REFS, n_samples=200)
    assert res["wins_a"] == res["wins_b"] == 0 and res["ties"] == 200
    assert res["ci_a"] == res["ci_b"] and res["mean_a"] == res["mean_b"]
    assert res["p_value"] == 1.0  # A never beats B: no evidence that A is better


def test_deterministic_given_seed() -> None:
    one = paired_bootstrap(SYS_A, SYS_B, REFS, n_samples=300, seed=5)
    assert one == paired_bootstrap(SYS_A, SYS_B, REFS, n_samples=300, seed=5)
    assert one["mean_a"] != paired_bootstrap(SYS_A, SYS_B, REFS, n_samples=300, seed=6)["mean_a"]


def test_resamples_draw_n_sentences_with_replacement() -> None:
    n = 7
    (counts,) = _resampled_sums([np.eye(n, dtype=np.int64)], n_samples=600, seed=0)  # (R, N) multiplicities
    assert counts.shape == (600, n) and (counts.sum(1) == n).all() and (counts >= 0).all()
    assert len({tuple(r) for r in counts.tolist()}) > 100  # resamples differ from each other


def test_bad_inputs() -> None:
    with pytest.raises(DataError, match="system B has 199 lines, references has 200"):
        paired_bootstrap(SYS_A, SYS_B[:-1], REFS)
    with pytest.raises(ConfigError, match="n_samples"):
        paired_bootstrap(SYS_A, SYS_B, REFS, n_samples=0)
