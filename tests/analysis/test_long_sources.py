"""long_sources (Neishi's long-sentence endpoints) on hand-made test sets: the subset is exactly the
sources longer than the training maximum, the per-seed BLEU and length differences are those of
sacreBLEU and of the lengths given, and the one-sided tests point the paper's way."""

from __future__ import annotations

import csv

import pytest
import sacrebleu
from scipy import stats

from posenc.analysis.long_sources import bootstrap_length, long_sources, long_subset, one_sided_welch
from posenc.errors import DataError

REFS = ["a b c d", "the cat sat on the mat today", "a dog ran in the big green park", "x y"]
SRC_LENGTHS = [5, 25, 30, 10]  # with train_max 20, sentences 1 and 2 are long
REF_LENGTHS = [4, 7, 8, 2]
GOOD = ["a b c d", "the cat sat on the mat today", "a dog ran in the big green park", "x y"]
SHORT = ["a b c d", "the cat sat", "a dog ran in", "x y"]


def _lengths(per_seed: list[list[str]]) -> list[list[int]]:
    return [[len(h.split()) for h in hyps] for hyps in per_seed]


def test_the_subset_is_the_sources_longer_than_training() -> None:
    assert long_subset(SRC_LENGTHS, 20) == [1, 2]
    assert long_subset(SRC_LENGTHS, 25) == [2]  # equal to the training maximum is seen


@pytest.mark.filterwarnings("ignore:Precision loss occurred")  # identical seeds: zero spread on purpose
def test_rows_are_sacrebleu_and_mean_length_differences_on_the_subset(tmp_path) -> None:
    hyps = {"ape": [SHORT, SHORT], "rnn": [GOOD, GOOD]}
    rows = long_sources(SRC_LENGTHS, REFS, REF_LENGTHS, hyps, {m: _lengths(h) for m, h in hyps.items()}, tmp_path,
                        train_max=20, n_samples=200)
    ape, rnn = rows
    expected = sacrebleu.corpus_bleu([SHORT[1], SHORT[2]], [[REFS[1], REFS[2]]]).score
    assert ape["bleu"] == pytest.approx(expected) and rnn["bleu"] == pytest.approx(100.0)
    assert ape["sentences"] == rnn["sentences"] == 2 and ape["seeds"] == 2
    assert ape["out_minus_ref"] == pytest.approx(((3 - 7) + (4 - 8)) / 2)  # the two long sentences only
    assert rnn["out_minus_ref"] == 0.0
    assert "bleu_gain" not in ape  # the baseline is not compared with itself
    assert rnn["bleu_gain"] == pytest.approx(100.0 - expected) and rnn["len_gain"] == pytest.approx(4.0)
    assert rnn["bleu_boot_p"] == 0.0 and rnn["len_boot_p"] == 0.0  # ahead on every resample
    with open(tmp_path / "long_sources.csv", newline="", encoding="utf-8") as fh:
        assert [r["method"] for r in csv.DictReader(fh)] == ["ape", "rnn"]
    assert (tmp_path / "long_sources.png").is_file() and "| rnn |" in (tmp_path / "long_sources.md").read_text()


def test_welch_is_one_sided_in_the_direction_of_the_first_system() -> None:
    a, b = [21.0, 22.0, 23.0], [19.0, 20.0, 20.5]
    up, down = one_sided_welch(a, b), one_sided_welch(b, a)
    assert up["gain"] == pytest.approx(sum(a) / 3 - sum(b) / 3)
    assert up["p"] == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue / 2)  # t > 0: half the two-sided p
    assert up["p"] + down["p"] == pytest.approx(1.0)
    assert up["low"] < up["gain"] < up["high"]


def test_length_bootstrap_counts_resamples_not_ahead() -> None:
    assert bootstrap_length([5, 6, 7], [4, 5, 6], 100, seed=0) == 0.0  # longer on every sentence
    assert bootstrap_length([4, 5, 6], [5, 6, 7], 100, seed=0) == 1.0
    assert bootstrap_length([5, 5], [5, 5], 50, seed=0) == 1.0  # a tie is not ahead


def test_bad_inputs_are_one_line_errors(tmp_path) -> None:
    hyps = {"ape": [SHORT], "rnn": [GOOD]}
    lengths = {m: _lengths(h) for m, h in hyps.items()}
    with pytest.raises(DataError, match="no test source is longer than 30"):
        long_sources(SRC_LENGTHS, REFS, REF_LENGTHS, hyps, lengths, tmp_path, train_max=30)
    with pytest.raises(DataError, match="same number"):
        long_sources(SRC_LENGTHS, REFS, REF_LENGTHS, {"ape": [SHORT], "rnn": [GOOD, GOOD]},
                     {"ape": _lengths([SHORT]), "rnn": _lengths([GOOD, GOOD])}, tmp_path, train_max=20)
    with pytest.raises(DataError, match="outputs of rnn"):
        long_sources(SRC_LENGTHS, REFS, REF_LENGTHS, {"ape": [SHORT], "rnn": [GOOD[:3]]}, lengths, tmp_path,
                     train_max=20)
    with pytest.raises(DataError, match="baseline 'rpe'"):
        long_sources(SRC_LENGTHS, REFS, REF_LENGTHS, hyps, lengths, tmp_path, train_max=20, baseline="rpe")
