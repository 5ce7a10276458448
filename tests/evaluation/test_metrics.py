"""sacreBLEU wrappers: equality with sacrebleu's own functions, edge cases, file errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import sacrebleu

from posenc.errors import DataError
from posenc.evaluation import corpus_scores, evaluate_files, sentence_bleu

REFS = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog!",
    "He said: \"it's fine\", didn't he?",
    "Short.",
]
HYPS = [
    "The cat is on the mat.",
    "A fast brown fox jumped over a lazy dog!",
    "He said it's fine, didn't he?",
    "",
]


def test_corpus_scores_equal_sacrebleu() -> None:
    scores = corpus_scores(HYPS, REFS)
    assert scores["bleu"] == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert scores["chrf"] == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    assert 0 < scores["bleu"] < 100 and scores["lines"] == 4
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert scores["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:")
    assert scores["bleu_text"].startswith(f"BLEU = {scores['bleu']:.2f} ")


def test_identical_text_scores_100() -> None:
    scores = corpus_scores(REFS, REFS)
    assert scores["bleu"] == pytest.approx(100.0) and scores["chrf"] == pytest.approx(100.0)
    assert sentence_bleu(REFS[1], REFS[1]) == pytest.approx(100.0)


def test_sentence_bleu_equals_sacrebleu() -> None:
    for h, r in zip(HYPS, REFS):
        assert sentence_bleu(h, r) == sacrebleu.sentence_bleu(h, [r]).score


def test_mismatched_counts_raise_data_error() -> None:
    with pytest.raises(DataError, match="^line counts differ: hypotheses has 3 lines, references has 4$"):
        corpus_scores(HYPS[:3], REFS)
    with pytest.raises(DataError, match="empty"):
        corpus_scores([], [])


def test_evaluate_files(tmp_path: Path) -> None:
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    assert evaluate_files(hyp, ref)["bleu"] == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    short = tmp_path / "short.txt"
    short.write_text("\n".join(HYPS[:2]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=f"{short} has 2 lines, {ref} has 4"):
        evaluate_files(short, ref)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\nok\n\xc3(\nok\n")
    with pytest.raises(DataError, match="bad.txt: line 3: invalid UTF-8"):
        evaluate_files(bad, ref)
