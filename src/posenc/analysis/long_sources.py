"""Translation of sources longer than any seen in training, tested per method against a baseline
(Neishi & Yoshinaga 2019, §5.2: Table 3 / Fig. 3 BLEU and Fig. 4 output length on the bins past
the training lengths).

The test sentences whose source is longer than ``train_max`` (the longest training source, in
the unit the caller measures: subwords, as the paper) are the "long" subset. For every method
and training seed: corpus BLEU on that subset and the mean output − reference length there
(negative = too short). Each method is then compared with the baseline in the direction the
paper claims (higher BLEU; a length difference above the baseline's, i.e. less shortening: the
signed difference of Neishi Fig. 4, so a method that overshoots also counts as "above"; the table
shows the signed values) by

* Welch's t-test over the per-seed values (one-sided, with the two-sided 95 % interval of the
  difference; :func:`posenc.evaluation.seeds.seed_test`), the training-seed noise; and
* a paired bootstrap over the long sentences with the seeds pooled (each seed's sentence paired
  with the same seed's sentence of the baseline; Koehn 2004), the test-set noise: for BLEU
  :func:`posenc.evaluation.bootstrap.paired_bootstrap`, for length the mean difference of the
  resampled sentences. Its p is the share of resamples in which the method is not ahead.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from posenc.analysis import plots
from posenc.analysis.common import check_same_length, corpus_bleu
from posenc.errors import DataError
from posenc.evaluation.bootstrap import paired_bootstrap
from posenc.evaluation.seeds import seed_test

#: Per-seed outputs of one method: one list of hypotheses (or of lengths) per seed, each aligned
#: with the test set.
PerSeed = Sequence[Sequence[Any]]


def long_subset(src_lengths: Sequence[int], train_max: int) -> list[int]:
    """The test sentences whose source is longer than every training source.

    Args:
        src_lengths: source length of every test sentence.
        train_max: the longest training source (same unit).

    Returns:
        The indices of the sentences with a source longer than ``train_max``, in order.
    """
    return [i for i, n in enumerate(src_lengths) if n > train_max]


def per_seed_scores(
    subset: Sequence[int], refs: Sequence[str], ref_lengths: Sequence[int], hyps: PerSeed, hyp_lengths: PerSeed
) -> tuple[list[float], list[float]]:
    """BLEU and mean output − reference length on a subset of the test set, one value per seed.

    Args:
        subset: indices of the test sentences to score (:func:`long_subset`).
        refs: the references of the whole test set.
        ref_lengths: their lengths.
        hyps: one method's outputs, one list per seed, each aligned with the test set.
        hyp_lengths: their lengths, likewise.

    Returns:
        ``(bleu, diff)``: the corpus BLEU and the mean output − reference length on ``subset``, one
        value per seed each.
    """
    ref_sub = [refs[i] for i in subset]
    bleu = [corpus_bleu([h[i] for i in subset], ref_sub) for h in hyps]
    diff = [float(np.mean([lengths[i] - ref_lengths[i] for i in subset])) for lengths in hyp_lengths]
    return bleu, diff


def one_sided_welch(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Welch's test (unequal variances) of "a > b" over per-seed values.

    Args:
        a: one method's per-seed values.
        b: the baseline's per-seed values.

    Returns:
        ``gain`` = mean(a) − mean(b), its two-sided 95 % interval (``low``, ``high``) and the
        one-sided ``p`` of "a > b"; NaN ``p`` and interval with fewer than two seeds on a side.
    """
    if len(a) < 2 or len(b) < 2:
        return {"gain": statistics.fmean(a) - statistics.fmean(b), "low": np.nan, "high": np.nan, "p": np.nan}
    t = seed_test(a, b)
    return {"gain": t.diff, "low": t.low, "high": t.high, "p": t.p_above}


def bootstrap_length(a: Sequence[int], b: Sequence[int], n_samples: int, seed: int) -> float:
    """Paired-bootstrap test of "system a's outputs are longer than system b's" on the same sentences.

    Args:
        a: one system's output lengths.
        b: the other's on the same sentences, aligned.
        n_samples: the resamples of sentences.
        seed: the resampling generator's seed.

    Returns:
        The share of resamples in which the mean of ``a − b`` is not above 0 (the one-sided p).
    """
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    means = np.array([diff[rng.integers(0, diff.size, diff.size)].mean() for _ in range(n_samples)])
    return float((means <= 0).mean())


def pooled(subset: Sequence[int], per_seed: PerSeed) -> list[Any]:
    """The subset's items of every seed, seed after seed.

    Args:
        subset: indices into each seed's list.
        per_seed: one list per seed (outputs, lengths or references), each aligned with the test set.

    Returns:
        ``per_seed[0][i] for i in subset``, then the same of the next seed, and so on.
    """
    return [values[i] for values in per_seed for i in subset]


def compare(method: str, baseline: str, scores: Mapping[str, tuple[list[float], list[float]]], subset: Sequence[int],
            refs: Sequence[str], hyps: Mapping[str, PerSeed], hyp_lengths: Mapping[str, PerSeed], n_samples: int,
            seed: int) -> dict[str, Any]:
    """The comparison of one method with the baseline: both tests for BLEU and for length.

    Args:
        method: the method compared.
        baseline: the method it is compared with.
        scores: method → its per-seed ``(bleu, diff)`` (:func:`per_seed_scores`).
        subset: indices of the long test sentences.
        refs: the references of the whole test set.
        hyps: method → its per-seed outputs, aligned with the test set.
        hyp_lengths: method → their lengths, likewise.
        n_samples: paired-bootstrap resamples.
        seed: the resampling generator's seed.

    Returns:
        ``bleu_gain, bleu_low, bleu_high, bleu_p`` (Welch, one-sided), ``bleu_boot_p`` and the same
        ``len_*`` columns for the length difference; empty for the baseline itself.
    """
    if method == baseline:
        return {}
    bleu = one_sided_welch(scores[method][0], scores[baseline][0])
    length = one_sided_welch(scores[method][1], scores[baseline][1])
    row: dict[str, Any] = {f"bleu_{k}": v for k, v in bleu.items()} | {f"len_{k}": v for k, v in length.items()}
    refs_pooled = pooled(subset, [refs] * len(hyps[method]))
    boot = paired_bootstrap(pooled(subset, hyps[method]), pooled(subset, hyps[baseline]), refs_pooled,
                            n_samples=n_samples, seed=seed)
    row["bleu_boot_p"] = float(boot["p_value"])
    row["len_boot_p"] = bootstrap_length(pooled(subset, hyp_lengths[method]), pooled(subset, hyp_lengths[baseline]),
                                         n_samples, seed)
    return row


def long_sources(
    src_lengths: Sequence[int],
    refs: Sequence[str],
    ref_lengths: Sequence[int],
    hyps: Mapping[str, PerSeed],
    hyp_lengths: Mapping[str, PerSeed],
    out_dir: str | Path,
    train_max: int,
    baseline: str | None = None,
    n_samples: int = 1000,
    seed: int = 12345,
) -> list[dict[str, Any]]:
    """Per-method BLEU and length difference on the sources longer than ``train_max``, each
    tested against ``baseline`` → ``long_sources.csv``, ``long_sources.md``, ``long_sources.png``.

    Args:
        src_lengths: source length of every test sentence.
        refs: the references, one per test sentence.
        ref_lengths: their lengths.
        hyps: method → per-seed outputs, each aligned with the test set; every method needs the
            same number of seeds (they are paired seed by seed).
        hyp_lengths: method → the lengths of those outputs, likewise.
        out_dir: the output directory (created if needed).
        train_max: the longest training source; longer test sources form the subset.
        baseline: the method every other is compared with (default: the first).
        n_samples: paired-bootstrap resamples.
        seed: the resampling generator's seed.

    Returns:
        One row per method: ``method, sentences, seeds``, the mean over seeds ``bleu`` and
        ``out_minus_ref`` with their per-seed values (``*_seeds``), and against the baseline
        ``bleu_gain, bleu_low, bleu_high, bleu_p`` (Welch, one-sided), ``bleu_boot_p`` and the same
        ``len_*`` columns for the length difference (absent for the baseline itself).

    Raises:
        DataError: inputs that do not align, methods with different numbers of seeds, a baseline not
            among them, or no test source longer than ``train_max``.
    """
    _check(src_lengths, refs, ref_lengths, hyps, hyp_lengths)
    base = baseline if baseline is not None else next(iter(hyps))
    if base not in hyps:
        raise DataError(f"long_sources: baseline {base!r} is not among the models ({', '.join(hyps)})")
    subset = long_subset(src_lengths, train_max)
    if not subset:
        raise DataError(f"long_sources: no test source is longer than {train_max} (the longest training source)")
    scores = {m: per_seed_scores(subset, refs, ref_lengths, hyps[m], hyp_lengths[m]) for m in hyps}
    rows = []
    for m, (bleu, diff) in scores.items():
        row = {"method": m, "sentences": len(subset), "seeds": len(bleu), "bleu": statistics.fmean(bleu),
               "bleu_seeds": " ".join(f"{b:.2f}" for b in bleu), "out_minus_ref": statistics.fmean(diff),
               "out_minus_ref_seeds": " ".join(f"{d:.2f}" for d in diff)}
        rows.append(row | compare(m, base, scores, subset, refs, hyps, hyp_lengths, n_samples, seed))
    _write(rows, scores, plots.output_dir(out_dir), train_max)
    return rows


def _check(src_lengths: Sequence[int], refs: Sequence[str], ref_lengths: Sequence[int], hyps: Mapping[str, PerSeed],
           hyp_lengths: Mapping[str, PerSeed]) -> None:
    if not hyps:
        raise DataError("long_sources: no model outputs given")
    n = len(src_lengths)
    check_same_length("long_sources: references", refs, n, "source lengths")
    check_same_length("long_sources: reference lengths", ref_lengths, n, "source lengths")
    seeds = {len(h) for h in hyps.values()}
    if len(seeds) != 1 or 0 in seeds:
        raise DataError("long_sources: every model needs the same number (>= 1) of seeds, got "
                        + ", ".join(f"{m}: {len(h)}" for m, h in hyps.items()))
    for name in hyps:
        if len(hyp_lengths.get(name, ())) != len(hyps[name]):
            raise DataError(f"long_sources: output lengths of {name} do not cover its {len(hyps[name])} seeds")
        for k, (h, lengths) in enumerate(zip(hyps[name], hyp_lengths[name])):
            check_same_length(f"long_sources: outputs of {name} (seed #{k + 1})", h, n, "source lengths")
            check_same_length(f"long_sources: output lengths of {name} (seed #{k + 1})", lengths, n, "source lengths")


COLUMNS = ["method", "sentences", "seeds", "bleu", "bleu_seeds", "bleu_gain", "bleu_low", "bleu_high", "bleu_p",
           "bleu_boot_p", "out_minus_ref", "out_minus_ref_seeds", "len_gain", "len_low", "len_high", "len_p",
           "len_boot_p"]


def _md_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Markdown table: means with their per-seed values, gains with interval and both p."""
    def gain(r: dict[str, Any], k: str) -> str:
        if f"{k}_gain" not in r:
            return "–"
        interval = "" if np.isnan(r[f"{k}_low"]) else f" [{r[f'{k}_low']:+.2f}, {r[f'{k}_high']:+.2f}]"
        return f"{r[f'{k}_gain']:+.2f}{interval}"

    def p(r: dict[str, Any], key: str) -> str:
        return "–" if key not in r or np.isnan(r[key]) else f"{r[key]:.3f}"

    return [{"method": r["method"], "BLEU (seeds)": f"{r['bleu']:.2f} ({r['bleu_seeds']})",
             "BLEU gain [95 % CI]": gain(r, "bleu"), "BLEU p Welch": p(r, "bleu_p"), "BLEU p boot": p(r, "bleu_boot_p"),
             "out − ref (seeds)": f"{r['out_minus_ref']:+.2f} ({r['out_minus_ref_seeds']})",
             "less shortening [95 % CI]": gain(r, "len"), "length p Welch": p(r, "len_p"),
             "length p boot": p(r, "len_boot_p")} for r in rows]


def _write(rows: list[dict[str, Any]], scores: Mapping[str, tuple[list[float], list[float]]], out: Path,
           train_max: int) -> None:
    plots.write_csv(out / "long_sources.csv", rows, COLUMNS)
    md = _md_rows(rows)
    plots.write_markdown(out / "long_sources.md", md, list(md[0]))
    fig, axes = plots.figure(ncols=2, size=(9.0, 3.6))
    names = list(scores)
    colors = plots.model_colors(names)
    for ax, k, label in ((axes[0], 0, "BLEU"), (axes[1], 1, "output − reference length")):
        for x, m in enumerate(names):
            values = scores[m][k]
            ax.scatter([x] * len(values), values, color=colors[m], s=14)
            ax.hlines(statistics.fmean(values), x - 0.3, x + 0.3, color=colors[m])
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=45, ha="right")
        ax.set_ylabel(label)
        ax.set_title(f"sources > {train_max} subwords (dots: seeds)")
    plots.save_png(fig, out / "long_sources.png")
