"""SHAPE Table 1: BLEU of Y1' in original vs swapped order."""

from __future__ import annotations

import pytest

from posenc.analysis.common import corpus_bleu
from posenc.analysis.swapped import first_sentence_outputs, make_groups, swapped
from posenc.errors import DataError

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def corpus(n: int = 20) -> tuple[list[str], list[str]]:
    src = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(4 + i % 3)) for i in range(n)]
    tgt = [s if i % 2 else s.rsplit(" ", 1)[0] + " omega" for i, s in enumerate(src)]  # Y != X for even i
    return src, tgt


def copy(texts: list[str]) -> list[str]:
    return list(texts)


def test_copy_model_equals_plain_bleu(tmp_path):
    src, tgt = corpus(25)
    groups = make_groups(src, tgt, 10)
    assert len(groups) == 2  # the incomplete last group is dropped
    rows = swapped(groups, {"copy": copy}, tmp_path)
    plain = corpus_bleu([src[0], src[10]], [tgt[0], tgt[10]])
    assert 0 < plain < 100
    assert rows == [{"model": "copy", "original": pytest.approx(plain), "swapped": pytest.approx(plain), "drop": pytest.approx(0.0), "groups": 2, "misaligned": 0}]
    lines = (tmp_path / "swapped.csv").read_text().splitlines()
    assert lines[0] == "model,original,swapped,drop,groups,misaligned"
    assert lines[1] == f"copy,{round(plain, 6)!r},{round(plain, 6)!r},0.0,2,0"
    assert (tmp_path / "swapped.png").stat().st_size > 0


def test_position_dependent_model_drops(tmp_path):
    """A "model" that garbles the last sentence of its input loses X1 only when it is last."""

    def garble_last(texts: list[str]) -> list[str]:
        return [" <sep> ".join([*t.split(" <sep> ")[:-1], "zzz"]) for t in texts]

    src, tgt = corpus(20)
    groups = make_groups(src, tgt, 10)
    rows = swapped(groups, {"copy": copy, "garble": garble_last}, tmp_path)
    refs = [tgt[0], tgt[10]]
    assert rows[1]["original"] == pytest.approx(corpus_bleu([src[0], src[10]], refs))
    assert rows[1]["swapped"] == pytest.approx(corpus_bleu(["zzz", "zzz"], refs))
    assert rows[1]["drop"] > 0 and rows[0]["drop"] == 0


def test_misaligned_outputs_are_counted():
    src, tgt = corpus(10)
    groups = make_groups(src, tgt, 10)
    original, swapped_out, misaligned = first_sentence_outputs(groups, lambda t: [x.replace(" <sep> ", " ") for x in t], "<sep>")
    assert misaligned == 2
    assert original == [" ".join(src)]
    assert swapped_out == [" ".join([*src[1:], src[0]])]


def test_errors(tmp_path):
    with pytest.raises(DataError, match="no groups"):
        swapped([], {"copy": copy}, tmp_path)
    with pytest.raises(DataError, match="translate\\(\\) output: 1 items but 2 inputs"):
        swapped(make_groups(*corpus(10)), {"bad": lambda t: t[:1]}, tmp_path)
