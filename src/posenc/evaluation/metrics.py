"""Corpus- and sentence-level translation metrics via sacreBLEU (detokenized BLEU and chrF).

Scores are computed on detokenized text with sacreBLEU's defaults (BLEU: 13a tokenizer,
mixed case, exp smoothing; chrF: chrF2, character order 6), as reported by SHAPE and CAPE.
The signature strings returned with each score make the numbers reproducible (Post 2018).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

from posenc.data.text import read_lines
from posenc.errors import DataError

__all__ = ["check_aligned", "corpus_scores", "evaluate_files", "sentence_bleu"]

_SENTENCE_BLEU = BLEU(effective_order=True)


def check_aligned(hyps: Sequence[str], refs: Sequence[str], hyp_name: str = "hypotheses",
                  ref_name: str = "references") -> None:
    """Refuse hypotheses and references that are not line-aligned.

    Args:
        hyps: the hypotheses.
        refs: the references.
        hyp_name: what the hypotheses are called in the message (e.g. their file).
        ref_name: what the references are called.

    Raises:
        DataError: they differ in length or are empty.
    """
    if len(hyps) != len(refs):
        raise DataError(f"line counts differ: {hyp_name} has {len(hyps)} lines, {ref_name} has {len(refs)}")
    if not hyps:
        raise DataError(f"nothing to score: {hyp_name} and {ref_name} are empty")


def corpus_scores(
    hyps: Sequence[str], refs: Sequence[str], *, hyp_name: str = "hypotheses", ref_name: str = "references"
) -> dict[str, Any]:
    """Corpus BLEU and chrF of detokenized ``hyps`` against one reference each.

    Args:
        hyps: detokenized hypotheses.
        refs: one reference per hypothesis.
        hyp_name: what the hypotheses are called in messages.
        ref_name: what the references are called.

    Returns:
        ``{"bleu", "chrf"}`` scores (0–100), ``{"bleu_signature", "chrf_signature"}``,
        ``{"bleu_text", "chrf_text"}`` (sacreBLEU's one-line summaries, e.g. with the n-gram
        precisions and brevity penalty) and ``"lines"``.

    Raises:
        DataError: different line counts (naming ``hyp_name``/``ref_name`` and both counts), or none.
    """
    check_aligned(hyps, refs, hyp_name, ref_name)
    hyps, refs = list(hyps), list(refs)
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(hyps, [refs])
    chrf_score = chrf.corpus_score(hyps, [refs])
    return {
        "bleu": bleu_score.score,
        "chrf": chrf_score.score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "bleu_text": str(bleu_score),
        "chrf_text": str(chrf_score),
        "lines": len(hyps),
    }


def sentence_bleu(hyp: str, ref: str) -> float:
    """Sentence-level BLEU with effective n-gram order and exp smoothing.

    Args:
        hyp: a detokenized hypothesis.
        ref: its reference.

    Returns:
        BLEU (0–100).
    """
    return _SENTENCE_BLEU.sentence_score(hyp, [ref]).score


def evaluate_files(hyp_path: str | os.PathLike[str], ref_path: str | os.PathLike[str]) -> dict[str, Any]:
    """:func:`corpus_scores` of two line-aligned UTF-8 files (read strictly; ``.gz`` allowed).

    Args:
        hyp_path: the hypotheses file.
        ref_path: the references file.

    Returns:
        The scores, as :func:`corpus_scores` returns them.

    Raises:
        DataError: unreadable or misaligned files.
    """
    hyps, refs = read_lines(hyp_path), read_lines(ref_path)
    return corpus_scores(hyps, refs, hyp_name=str(hyp_path), ref_name=str(ref_path))
