"""Evaluation: sacreBLEU BLEU/chrF, paired bootstrap significance tests and a test across seeds."""

from posenc.evaluation.bootstrap import bleu_from_statistics, bleu_statistics, paired_bootstrap
from posenc.evaluation.metrics import check_aligned, corpus_scores, evaluate_files, sentence_bleu
from posenc.evaluation.seeds import SeedTest, seed_test

__all__ = [
    "SeedTest",
    "bleu_from_statistics",
    "bleu_statistics",
    "check_aligned",
    "corpus_scores",
    "evaluate_files",
    "paired_bootstrap",
    "seed_test",
    "sentence_bleu",
]
