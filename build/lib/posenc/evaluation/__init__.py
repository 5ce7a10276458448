"""Evaluation: sacreBLEU BLEU/chrF and paired bootstrap significance tests."""

from posenc.evaluation.bootstrap import bleu_from_statistics, bleu_statistics, paired_bootstrap
from posenc.evaluation.metrics import check_aligned, corpus_scores, evaluate_files, sentence_bleu

__all__ = [
    "bleu_from_statistics",
    "bleu_statistics",
    "check_aligned",
    "corpus_scores",
    "evaluate_files",
    "paired_bootstrap",
    "sentence_bleu",
]
