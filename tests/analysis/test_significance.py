"""Neishi Table 4: pairwise paired-bootstrap significance."""

from __future__ import annotations

import pytest

from posenc.analysis.significance import bootstrap_table, flip, symbol
from posenc.errors import DataError
from posenc.evaluation.bootstrap import paired_bootstrap

REFS = [f"sentence number {i} has some words and a few more words {i % 7}" for i in range(40)]
BAD = [f"unrelated output {i}" for i in range(40)]


def test_symbols():
    assert [symbol(0.001, 0.999), symbol(0.03, 0.97), symbol(0.5, 0.6), symbol(0.97, 0.03), symbol(0.999, 0.005)] == [">>", ">", "~", "<", "<<"]
    assert flip(">>") == "<<" and flip("~") == "~"


def test_table(tmp_path):
    hyps = {"good": REFS, "bad": BAD, "copy": list(REFS)}
    rows = bootstrap_table(hyps, REFS, tmp_path, n_samples=200, seed=1)
    assert [(r["a"], r["b"], r["symbol"]) for r in rows] == [("good", "bad", ">>"), ("good", "copy", "~"), ("bad", "copy", "<<")]
    direct = paired_bootstrap(REFS, BAD, REFS, n_samples=200, seed=1)
    assert rows[0]["p_a_better"] == direct["p_value"] and rows[0]["bleu_b"] == pytest.approx(direct["bleu_b"])
    assert rows[1]["p_a_better"] == rows[1]["p_b_better"] == 1.0  # identical systems never win
    bleu_bad = round(rows[0]["bleu_b"], 6)
    assert (tmp_path / "bootstrap.md").read_text() == (
        "| model | BLEU | good | bad | copy |\n"
        "|---|---|---|---|---|\n"
        "| good | 100.0 |  | >> | ~ |\n"
        f"| bad | {bleu_bad!r} | << |  | << |\n"
        "| copy | 100.0 | ~ | >> |  |\n"
    )
    assert (tmp_path / "bootstrap.csv").read_text().splitlines()[0] == (
        "a,b,bleu_a,bleu_b,ci_a_low,ci_a_high,ci_b_low,ci_b_high,p_a_better,p_b_better,symbol"
    )
    assert (tmp_path / "bootstrap.png").is_file()


def test_needs_two_models(tmp_path):
    with pytest.raises(DataError, match="at least two models"):
        bootstrap_table({"a": REFS}, REFS, tmp_path)
