"""Per-position negative log-likelihood on long (stacked) test sequences (CAPE §4.4, Fig. 8).

Each model scores the gold targets by teacher forcing; the NLL −log p(y_j | y_<j, X) is averaged
over all sequences that reach decoder position j (1-based, EOS included), optionally over
windows of ``window`` consecutive positions. Positions beyond the training lengths show how a
position method extrapolates. Over several training seeds, :func:`across_seeds` compares the
models' per-seed means over the seen and unseen positions by Welch's t-test (the seed noise).
"""

from __future__ import annotations

import csv
import itertools
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from posenc.analysis import plots
from posenc.analysis.common import gold_logprobs
from posenc.errors import DataError
from posenc.evaluation.seeds import seed_test

#: The per-seed output :func:`across_seeds` reads: :func:`seen_and_unseen`'s rows.
SPANS_CSV = "position_nll_spans.csv"


def position_nll_table(logprobs: Sequence[np.ndarray], window: int = 1) -> list[dict[str, Any]]:
    """Rows ``position, tokens, nll``; ``position`` is the first position of each window."""
    if window < 1:
        raise DataError(f"position_nll: window must be >= 1, got {window}")
    longest = max((len(x) for x in logprobs), default=0)
    sums, counts = np.zeros(longest), np.zeros(longest, dtype=int)
    for x in logprobs:
        sums[: len(x)] -= x
        counts[: len(x)] += 1
    rows = []
    for start in range(0, longest, window):
        n = int(counts[start : start + window].sum())
        rows.append({"position": start + 1, "tokens": n, "nll": float(sums[start : start + window].sum() / n)})
    return rows


def seen_and_unseen(rows: Sequence[Mapping[str, Any]], train_max: int) -> list[dict[str, Any]]:
    """Token-weighted mean NLL per model over the positions training reached (``seen``: up to
    ``train_max`` + 1, the EOS after the longest training target) and over those past them
    (``unseen``; CAPE Fig. 8's "positions not seen during training"). Rows ``model, span,
    positions, tokens, nll``; a span without tokens is left out."""
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        for span, inside in (("seen", True), ("unseen", False)):
            part = [r for r in rows if r["model"] == model and (r["position"] <= train_max + 1) == inside]
            tokens = sum(r["tokens"] for r in part)
            if tokens:
                nll = sum(r["nll"] * r["tokens"] for r in part) / tokens
                out.append({"model": model, "span": span, "positions": len(part), "tokens": tokens, "nll": nll})
    return out


def position_nll(
    models: Mapping[str, nn.Module],
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]] | Mapping[str, Sequence[tuple[Sequence[int], Sequence[int]]]],
    out_dir: str | Path,
    bos_id: int,
    eos_id: int,
    pad_id: int = 0,
    window: int = 1,
    train_max: int | None = None,
    batch_size: int = 16,
) -> list[dict[str, Any]]:
    """NLL per decoder position per model → ``position_nll.csv`` and ``position_nll.png``.

    ``pairs`` are (source ids, target ids without BOS/EOS), e.g. stacked test sentences, or a
    mapping model name → its own pairs (each model scored with the source format it was trained on);
    ``train_max`` (longest training target) draws a vertical line in the plot and adds
    ``position_nll_spans.csv`` (:func:`seen_and_unseen`).
    Rows: ``model, position, tokens, nll``.
    """
    if not pairs:
        raise DataError("position_nll: no sentence pairs given")
    rows = []
    for name, model in models.items():
        own = pairs[name] if isinstance(pairs, Mapping) else pairs
        table = position_nll_table(gold_logprobs(model, own, bos_id, eos_id, pad_id, batch_size), window)
        rows += [{"model": name, **r} for r in table]
    out = plots.output_dir(out_dir)
    plots.write_csv(out / "position_nll.csv", rows)
    if train_max is not None:
        plots.write_csv(out / "position_nll_spans.csv", seen_and_unseen(rows, train_max))
    fig, (ax,) = plots.figure(size=(6.5, 3.8))
    series = {m: ([r["position"] for r in rows if r["model"] == m], [r["nll"] for r in rows if r["model"] == m])
              for m in models}
    plots.lines(ax, series, "decoder position", "mean NLL (nats)", "NLL by target position", markers=window > 1)
    if train_max is not None:
        ax.axvline(train_max, color="grey", linestyle="--", linewidth=0.8)
    plots.save_png(fig, out / "position_nll.png")
    return rows


def _span_means(seed_dirs: Mapping[int, Path]) -> dict[tuple[str, str], list[float]]:
    """(span, model) → its mean NLL in each seed (seed order), for the models every seed scored."""
    per_seed = {}
    for seed, folder in sorted(seed_dirs.items()):
        with (folder / SPANS_CSV).open(newline="", encoding="utf-8") as fh:
            per_seed[seed] = {(r["span"], r["model"]): float(r["nll"]) for r in csv.DictReader(fh)}
    shared = [key for key in next(iter(per_seed.values())) if all(key in rows for rows in per_seed.values())]
    return {key: [rows[key] for rows in per_seed.values()] for key in shared}


def across_seeds(seed_dirs: Mapping[int, Path], out_dir: str | Path) -> list[dict[str, Any]]:
    """Per-seed span means (:data:`SPANS_CSV` in each of ``seed_dirs``, seed → folder) over the
    seeds → ``position_nll_seeds.csv`` (``span, model, seeds, nll`` mean, ``nll_seeds``) and
    ``position_nll_pairs.csv``: every pair of models per span, ``diff`` = model − other (negative:
    the model predicts the gold tokens better), Welch's two-sided 95 % interval ``low``/``high`` and
    two-sided ``p`` over the per-seed means (:func:`~posenc.evaluation.seeds.seed_test`). Needs at
    least two seeds. Returns the pair rows."""
    if len(seed_dirs) < 2:
        raise DataError(f"position_nll across seeds needs at least 2 seeds, got {sorted(seed_dirs)}")
    means = _span_means(seed_dirs)
    seeds = " ".join(map(str, sorted(seed_dirs)))
    rows = [{"span": span, "model": model, "seeds": seeds, "nll": statistics.fmean(v),
             "nll_seeds": " ".join(f"{x:.4f}" for x in v)} for (span, model), v in means.items()]
    pairs = []
    for span in dict.fromkeys(span for span, _ in means):
        models = [m for s, m in means if s == span]
        for a, b in itertools.combinations(models, 2):
            t = seed_test(means[span, a], means[span, b])
            pairs.append({"span": span, "model": a, "other": b, "diff": t.diff, "low": t.low, "high": t.high,
                          "p": t.p})
    out = plots.output_dir(out_dir)
    plots.write_csv(out / "position_nll_seeds.csv", rows)
    plots.write_csv(out / "position_nll_pairs.csv", pairs)
    shown = [{**r, "nll": f"{r['nll']:.3f}"} for r in rows]
    compared = [{**r, "diff": f"{r['diff']:+.3f}", "interval": f"[{r['low']:+.3f}, {r['high']:+.3f}]",
                 "p": f"{r['p']:.3f}"} for r in pairs]
    (out / "position_nll_seeds.md").write_text(
        plots.markdown_table(shown, ["span", "model", "seeds", "nll", "nll_seeds"]) + "\n"
        + plots.markdown_table(compared, ["span", "model", "other", "diff", "interval", "p"]), encoding="utf-8")
    return pairs
