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
    """Mean NLL per decoder position (or window of positions) over the sequences that reach it.

    Args:
        logprobs: per sequence, the gold tokens' log-probabilities by decoder position
            (:func:`~posenc.analysis.common.gold_logprobs`).
        window: consecutive positions averaged together, >= 1.

    Returns:
        Rows ``position, tokens, nll``: ``position`` the first (1-based) position of each window,
        ``tokens`` the gold tokens in it, ``nll`` their mean negative log-probability (nats).

    Raises:
        DataError: ``window`` < 1.
    """
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
    (``unseen``; CAPE Fig. 8's "positions not seen during training").

    Args:
        rows: the rows of :func:`position_nll` (``model, position, tokens, nll``).
        train_max: the longest training target (tokens).

    Returns:
        Rows ``model, span, positions, tokens, nll``, seen before unseen per model; a span without
        tokens is left out.
    """
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

    Args:
        models: name → trained sequence-to-sequence model.
        pairs: (source ids, target ids without BOS/EOS), e.g. stacked test sentences, or a mapping
            model name → its own pairs (each model scored with the source format it was trained on).
        out_dir: the output directory (created if needed).
        bos_id: the tokenizer's BOS id.
        eos_id: the tokenizer's EOS id.
        pad_id: the tokenizer's padding id.
        window: consecutive positions averaged together in the table and plot.
        train_max: the longest training target (tokens): draws a vertical line in the plot and adds
            ``position_nll_spans.csv`` (:func:`seen_and_unseen`); None: neither.
        batch_size: pairs per forward pass.

    Returns:
        The rows written: ``model, position, tokens, nll``.

    Raises:
        DataError: no pairs, or ``window`` < 1.
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
    """Compare the models' per-seed span means over the seeds.

    Writes ``position_nll_seeds.csv`` (``span, model, seeds``, mean ``nll``, ``nll_seeds``),
    ``position_nll_pairs.csv`` (every pair of models per span: ``diff`` = model − other, negative
    when the model predicts the gold tokens better; Welch's two-sided 95 % interval ``low``/``high``;
    two-sided ``p``; ``p_below``, the one-sided p of "model's NLL < other's", CAPE Fig. 8's direction
    when the model is the one claimed better; :func:`~posenc.evaluation.seeds.seed_test`), both
    tables as ``position_nll_seeds.md``, and the seed-mean curves ``position_nll_seeds.png``
    (:func:`plot_seed_means`).

    Args:
        seed_dirs: seed → the folder of that seed's :func:`position_nll` output (with :data:`SPANS_CSV`
            and ``position_nll.csv``); at least two seeds.
        out_dir: the output directory (created if needed).

    Returns:
        The pair rows.

    Raises:
        DataError: fewer than two seeds.
    """
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
                          "p": t.p, "p_below": t.p_below})
    out = plots.output_dir(out_dir)
    plots.write_csv(out / "position_nll_seeds.csv", rows)
    plots.write_csv(out / "position_nll_pairs.csv", pairs)
    shown = [{**r, "nll": f"{r['nll']:.3f}"} for r in rows]
    compared = [{**r, "diff": f"{r['diff']:+.3f}", "interval": f"[{r['low']:+.3f}, {r['high']:+.3f}]",
                 "p": f"{r['p']:.3f}", "p_below": f"{r['p_below']:.3f}"} for r in pairs]
    (out / "position_nll_seeds.md").write_text(
        plots.markdown_table(shown, ["span", "model", "seeds", "nll", "nll_seeds"]) + "\n"
        + plots.markdown_table(compared, ["span", "model", "other", "diff", "interval", "p", "p_below"]),
        encoding="utf-8")
    plot_seed_means(seed_dirs, out / "position_nll_seeds.png")
    return pairs


def _windowed(rows: Sequence[Mapping[str, str]], window: int) -> dict[str, dict[int, float]]:
    """model → {first position of each ``window``-position window: token-weighted mean NLL}."""
    sums: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        start = (int(r["position"]) - 1) // window * window + 1
        acc = sums.setdefault(r["model"], {}).setdefault(start, [0.0, 0.0])
        acc[0] += float(r["nll"]) * int(r["tokens"])
        acc[1] += int(r["tokens"])
    return {m: {p: s / n for p, (s, n) in by.items() if n} for m, by in sums.items()}


def plot_seed_means(seed_dirs: Mapping[int, Path], path: Path, points: int = 40) -> None:
    """CAPE Fig. 8 over training seeds: each model's NLL per window of positions (token-weighted), the
    mean over the seeds with their min–max band, and a dashed line after the last seen position.

    Args:
        seed_dirs: seed → the folder of that seed's :func:`position_nll` output (its
            ``position_nll.csv`` and :data:`SPANS_CSV`, whose ``seen`` span gives the last seen position).
        path: the PNG file to write.
        points: about how many points a curve has (the windows are as wide as gives that many).
    """
    tables = {}
    for seed, folder in seed_dirs.items():
        with (folder / "position_nll.csv").open(newline="", encoding="utf-8") as fh:
            tables[seed] = list(csv.DictReader(fh))
    window = max(1, round(max(int(r["position"]) for rows in tables.values() for r in rows) / points))
    curves: dict[str, dict[int, list[float]]] = {}
    last_seen = 0
    for seed, folder in seed_dirs.items():
        for model, by in _windowed(tables[seed], window).items():
            for start, nll in by.items():
                curves.setdefault(model, {}).setdefault(start, []).append(nll)
        with (folder / SPANS_CSV).open(newline="", encoding="utf-8") as fh:
            last_seen = max([last_seen] + [int(r["positions"]) for r in csv.DictReader(fh) if r["span"] == "seen"])
    fig, (ax,) = plots.figure(size=(6.5, 3.8))
    for model, by in curves.items():
        starts = sorted(p for p, v in by.items() if len(v) == len(seed_dirs))  # windows every seed reached
        centres = [p + (window - 1) / 2 for p in starts]
        ax.plot(centres, [statistics.fmean(by[p]) for p in starts], label=model)
        ax.fill_between(centres, [min(by[p]) for p in starts], [max(by[p]) for p in starts], alpha=0.2)
    ax.axvline(last_seen + 0.5, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel(f"decoder position (windows of {window})")
    ax.set_ylabel("mean NLL (nats)")
    ax.set_title(f"NLL by target position, mean of seeds {', '.join(map(str, sorted(seed_dirs)))} (band: min-max)")
    ax.legend(frameon=False, fontsize=8)
    plots.save_png(fig, path)
