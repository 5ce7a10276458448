"""Length analyses on hand-made data: BLEU by source length, length difference, histograms."""

from __future__ import annotations

import pytest

from posenc.analysis.common import Buckets, corpus_bleu
from posenc.analysis.length_bleu import length_bleu
from posenc.analysis.length_diff import length_diff, output_length_histogram
from posenc.errors import DataError

BUCKETS = Buckets((0, 10, 20, 30))
SRC_LENGTHS = [3, 5, 12, 15, 18, 25, 61]
REFS = [
    "the cat sat on the mat",
    "a dog ran in the park today",
    "birds sing in the morning light",
    "we eat bread and cheese at noon",
    "rain falls on the old roof",
    "the train leaves at nine sharp",
    "snow covers the quiet hills tonight",
]


def test_length_bleu_counts_and_gains(tmp_path):
    good = list(REFS)
    half = [r if i % 2 == 0 else "zzz qqq xxx" for i, r in enumerate(REFS)]
    rows = length_bleu(SRC_LENGTHS, REFS, {"ape": half, "shape": good}, tmp_path, BUCKETS, train_lengths=[1, 4, 11, 14, 19])
    assert [r["sentences"] for r in rows[:4]] == [2, 3, 1, 1]
    assert [r["seen"] for r in rows[:4]] == [True, True, False, False]
    by = {(r["model"], r["bucket"]): r for r in rows}
    assert by["shape", "0-9"]["bleu"] == pytest.approx(100.0)
    ape_10 = corpus_bleu([half[i] for i in (2, 3, 4)], [REFS[i] for i in (2, 3, 4)])
    assert by["ape", "10-19"]["bleu"] == pytest.approx(ape_10)
    assert by["shape", "10-19"]["gain"] == pytest.approx(100.0 - ape_10)
    assert by["ape", "30-"]["gain"] == 0.0
    assert by["shape", "20-29"]["gain"] == pytest.approx(100.0)  # half[5] is wrong
    assert (tmp_path / "length_bleu.csv").read_text().splitlines()[0] == "model,bucket,sentences,bleu,gain,seen"
    assert (tmp_path / "length_bleu.png").is_file()


def test_length_bleu_empty_bucket_and_train_max(tmp_path):
    rows = length_bleu([3, 25], REFS[:2], {"m": REFS[:2]}, tmp_path, BUCKETS, train_max=12)
    # seen: every sentence of the bucket within the training range (10-19 holds none: not seen)
    assert [(r["sentences"], r["seen"]) for r in rows] == [(1, True), (0, False), (1, False), (0, False)]
    assert [r["bleu"] for r in rows] == [pytest.approx(100.0), None, pytest.approx(100.0), None]
    assert (tmp_path / "length_bleu.csv").read_text().splitlines()[1:] == ["m,0-9,1,100.0,0.0,True", "m,10-19,0,,,False", "m,20-29,1,100.0,0.0,False", "m,30-,0,,,False"]


def test_length_bleu_errors(tmp_path):
    with pytest.raises(DataError, match="outputs of m: 1 items but 2 source lengths"):
        length_bleu([1, 2], REFS[:2], {"m": REFS[:1]}, tmp_path)
    with pytest.raises(DataError, match="baseline 'x'"):
        length_bleu([1], REFS[:1], {"m": REFS[:1]}, tmp_path, baseline="x")


def test_length_diff_exact(tmp_path):
    src = [3, 8, 12, 15, 35]
    ref = [4, 9, 13, 16, 40]
    hyps = {"ape": [4, 7, 13, 20, 30], "rr": [5, 9, 12, 16, 41]}
    rows = length_diff(src, ref, hyps, tmp_path, BUCKETS, hist_buckets=["0-9", "10-19"], train_max=19)
    assert (tmp_path / "length_diff.csv").read_text() == (
        "model,bucket,sentences,mean_diff,seen\n"
        "ape,0-9,2,-1.0,True\n"
        "ape,10-19,2,2.0,True\n"
        "ape,20-29,0,,False\n"
        "ape,30-,1,-10.0,False\n"
        "rr,0-9,2,0.5,True\n"
        "rr,10-19,2,-0.5,True\n"
        "rr,20-29,0,,False\n"
        "rr,30-,1,1.0,False\n"
    )
    assert rows[0] == {"model": "ape", "bucket": "0-9", "sentences": 2, "mean_diff": -1.0, "seen": True}
    assert (tmp_path / "length_hist.csv").read_text() == (
        "model,bucket,output_length,sentences\n"
        "ape,0-9,4,1\nape,0-9,7,1\nrr,0-9,5,1\nrr,0-9,9,1\n"
        "ape,10-19,13,1\nape,10-19,20,1\nrr,10-19,12,1\nrr,10-19,16,1\n"
    )
    assert (tmp_path / "length_diff.png").is_file() and (tmp_path / "length_hist.png").is_file()


def test_output_length_histogram_counts():
    rows = output_length_histogram([1, 2, 3, 15], {"m": [5, 5, 6, 9]}, BUCKETS, "0-9")
    assert rows == [{"model": "m", "bucket": "0-9", "output_length": 5, "sentences": 2}, {"model": "m", "bucket": "0-9", "output_length": 6, "sentences": 1}]
    with pytest.raises(DataError, match="unknown bucket '40-49'"):
        output_length_histogram([1], {"m": [1]}, BUCKETS, "40-49")
