"""Paired bootstrap resampling for BLEU (Koehn 2004), vectorised over sufficient statistics.

Shape legend: N sentences, F = 2 + 2·n_max statistics per sentence, R resamples.

Corpus BLEU only depends on the sums of per-sentence statistics ``[hyp_len, ref_len,
matches_1..n, totals_1..n]`` (sacreBLEU's layout). They are extracted once per system; each
bootstrap sample draws N sentence ids with replacement (the same ids for both systems: paired),
turns them into per-sentence multiplicities ``(R, N)`` and sums statistics with one matrix
product. BLEU of a sample is then computed from its summed statistics with sacreBLEU's public
``BLEU.compute_bleu``, so the full-sample value equals ``sacrebleu.corpus_bleu`` exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU

from posenc.errors import ConfigError
from posenc.evaluation.metrics import check_aligned

__all__ = ["bleu_from_statistics", "bleu_statistics", "paired_bootstrap"]

_CHUNK = 256  # resamples per matrix product (bounds memory at _CHUNK·N counts)


def _ngram_counts(tokens: list[str], max_order: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for n in range(1, max_order + 1) for i in range(len(tokens) - n + 1))


def bleu_statistics(hyps: Sequence[str], refs: Sequence[str], bleu: BLEU | None = None) -> np.ndarray:
    """Per-sentence BLEU sufficient statistics ``(N, F)`` int64, one reference per sentence.

    Text is preprocessed like sacreBLEU does (optional lowercasing, its tokenizer on the
    right-stripped line); clipped n-gram matches follow Papineni et al. (2002).

    Args:
        hyps: detokenized hypotheses, one per sentence.
        refs: the references, line-aligned with ``hyps``.
        bleu: the sacreBLEU metric whose preprocessing and n-gram order apply (default: ``BLEU()``).

    Returns:
        Int64 statistics ``(N, F)``: ``[hyp_len, ref_len, matches_1..n, totals_1..n]`` per sentence.

    Raises:
        DataError: line counts differ or are zero.
    """
    check_aligned(hyps, refs)
    bleu = bleu or BLEU()
    order = bleu.max_ngram_order
    rows = []
    for hyp, ref in zip(hyps, refs):
        h_tok, r_tok = (bleu.tokenizer((s.lower() if bleu.lowercase else s).rstrip()).split() for s in (hyp, ref))
        h_counts, r_counts = _ngram_counts(h_tok, order), _ngram_counts(r_tok, order)
        correct, total = [0] * order, [0] * order
        for gram, count in h_counts.items():
            total[len(gram) - 1] += count
            correct[len(gram) - 1] += min(count, r_counts.get(gram, 0))
        rows.append([len(h_tok), len(r_tok), *correct, *total])
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), 2 + 2 * order)


def bleu_from_statistics(stats: np.ndarray, bleu: BLEU | None = None) -> float:
    """Corpus BLEU from summed statistics.

    Args:
        stats: statistics ``(F,)`` summed over sentences (:func:`bleu_statistics` layout).
        bleu: the sacreBLEU metric whose smoothing and order apply (default: ``BLEU()``, exp smoothing).

    Returns:
        BLEU (0–100).
    """
    bleu = bleu or BLEU()
    values = [int(v) for v in stats]
    n = bleu.max_ngram_order
    return BLEU.compute_bleu(
        correct=values[2 : 2 + n], total=values[2 + n :], sys_len=values[0], ref_len=values[1],
        smooth_method=bleu.smooth_method, smooth_value=bleu.smooth_value,
        effective_order=bleu.effective_order, max_ngram_order=n,
    ).score


def _resampled_sums(stats: list[np.ndarray], n_samples: int, seed: int) -> list[np.ndarray]:
    """Summed statistics ``(R, F)`` of each system over the same R resamples of the N sentences."""
    rng = np.random.default_rng(seed)
    n = stats[0].shape[0]
    sums: list[list[np.ndarray]] = [[] for _ in stats]
    for start in range(0, n_samples, _CHUNK):
        r = min(_CHUNK, n_samples - start)
        dtype = np.int32 if r * n < 2**31 else np.int64  # int32 draws are ~2x faster
        ids = rng.integers(0, n, size=(r, n), dtype=dtype)  # (R, N) drawn with replacement
        offsets = np.arange(r, dtype=dtype)[:, None] * n
        counts = np.bincount((ids + offsets).ravel(), minlength=r * n).reshape(r, n)  # (R, N)
        for acc, s in zip(sums, stats):
            acc.append(counts @ s)
    return [np.concatenate(acc) for acc in sums]


def paired_bootstrap(
    hyps_a: Sequence[str], hyps_b: Sequence[str], refs: Sequence[str], n_samples: int = 1000, seed: int = 12345
) -> dict[str, Any]:
    """Paired bootstrap test of system A against system B on the same references (Koehn 2004).

    Args:
        hyps_a: system A's detokenized hypotheses.
        hyps_b: system B's, line-aligned with A's.
        refs: the references.
        n_samples: R, the resamples (Neishi & Yoshinaga 2019, Table 4, use 10,000).
        seed: seed of the resampling generator.

    Returns:
        ``bleu_a``/``bleu_b`` (full test set), ``mean_a``/``mean_b`` and 95% percentile
        intervals ``ci_a``/``ci_b`` over the resamples, ``wins_a``/``wins_b`` (resamples where
        that system scores strictly higher; the rest are ties), ``ties``, ``n_samples`` and
        ``p_value`` = fraction of resamples in which A does *not* beat B: the p-value of the
        claim "A is better than B" (small p → A is significantly better).

    Raises:
        DataError: line counts differ or are zero.
        ConfigError: ``n_samples < 1``.
    """
    if n_samples < 1:
        raise ConfigError(f"n_samples must be >= 1, got {n_samples}")
    check_aligned(hyps_a, refs, "system A", "references")
    check_aligned(hyps_b, refs, "system B", "references")
    bleu = BLEU()
    stats = [bleu_statistics(h, refs, bleu) for h in (hyps_a, hyps_b)]
    sums = _resampled_sums(stats, n_samples, seed)
    scores = [np.array([bleu_from_statistics(row, bleu) for row in s]) for s in sums]
    wins_a, wins_b = int((scores[0] > scores[1]).sum()), int((scores[1] > scores[0]).sum())
    out: dict[str, Any] = {}
    for name, s, sc in zip("ab", stats, scores):
        out[f"bleu_{name}"] = bleu_from_statistics(s.sum(0), bleu)
        out[f"mean_{name}"] = float(sc.mean())
        lo, hi = np.percentile(sc, [2.5, 97.5])
        out[f"ci_{name}"] = (float(lo), float(hi))
    out.update(wins_a=wins_a, wins_b=wins_b, ties=n_samples - wins_a - wins_b, n_samples=n_samples)
    out["p_value"] = (n_samples - wins_a) / n_samples
    return out
