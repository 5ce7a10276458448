"""Token-wise comparison of gold-token scores (SHAPE §4, Fig. 4).

Both models score every gold token by teacher forcing (log p(y_j | y_<j, X)); tokens are
grouped by decoder position j (1-based, EOS included) and by training frequency of the token.
Per cell we report the mean score difference (model − baseline) and, as SHAPE's Fig. 4 does,
the ratio of tokens on which the model scores higher than the baseline.

Frequency is either the token's frequency rank in the training data (``by="rank"``, 1 = most
frequent; SHAPE's rows 1-5000, 5001-15000, ...) or its raw training count (``by="count"``).
Tokens never seen in training get rank ``(number of seen types) + 1`` and count 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from posenc.analysis import plots
from posenc.analysis.common import Buckets, check_same_length, gold_logprobs
from posenc.errors import DataError

POSITION_BUCKETS = Buckets.uniform(10, 71, first=1)  # 1-10, 11-20, ..., 71-
RANK_BUCKETS = Buckets((1, 5001, 15001, 25001))


def token_counts(sequences: Iterable[Sequence[int]], eos_id: int | None = None) -> Counter[int]:
    """Token frequencies of the training targets.

    Args:
        sequences: the training targets as token ids (no BOS/EOS).
        eos_id: when given, one EOS is counted per sequence (the gold EOS the decoder predicts).

    Returns:
        Token id → its count.
    """
    counts: Counter[int] = Counter()
    for seq in sequences:
        counts.update(seq)
        if eos_id is not None:
            counts[eos_id] += 1
    return counts


def frequency_ranks(counts: Mapping[int, int]) -> dict[int, int]:
    """Frequency ranks of the tokens seen in training.

    Args:
        counts: token id → training count (:func:`token_counts`).

    Returns:
        Token id → rank, 1 for the most frequent (ties broken by token id); tokens with a zero count
        are left out.
    """
    ordered = sorted((t for t, c in counts.items() if c > 0), key=lambda t: (-counts[t], t))
    return {t: r for r, t in enumerate(ordered, start=1)}


def frequency_values(gold: Sequence[Sequence[int]], counts: Mapping[int, int], by: str) -> list[list[int]]:
    """The training frequency of every gold token, as a rank or a count.

    Args:
        gold: the gold tokens of each sentence (target + EOS).
        counts: token id → training count.
        by: ``rank`` (1 = most frequent; an unseen token gets the number of seen types + 1) or
            ``count`` (0 for an unseen token).

    Returns:
        Per sentence, one rank or count per gold token.

    Raises:
        DataError: ``by`` is neither ``rank`` nor ``count``.
    """
    if by == "rank":
        ranks = frequency_ranks(counts)
        unseen = len(ranks) + 1
        return [[ranks.get(t, unseen) for t in seq] for seq in gold]
    if by == "count":
        return [[int(counts.get(t, 0)) for t in seq] for seq in gold]
    raise DataError(f"tokenwise: frequency must be measured by 'rank' or 'count', got {by!r}")


def tokenwise_table(
    model_scores: Sequence[Sequence[float]],
    base_scores: Sequence[Sequence[float]],
    gold: Sequence[Sequence[int]],
    counts: Mapping[int, int],
    position_buckets: Buckets = POSITION_BUCKETS,
    freq_buckets: Buckets = RANK_BUCKETS,
    by: str = "rank",
) -> list[dict[str, Any]]:
    """The model's and the baseline's gold-token scores compared per (frequency, position) cell.

    Args:
        model_scores: per sentence, the model's log-probability of each gold token.
        base_scores: the baseline's, likewise.
        gold: per sentence, the gold tokens (target + EOS), aligned with the scores.
        counts: token id → training count.
        position_buckets: the decoder-position buckets (1-based positions).
        freq_buckets: the frequency buckets (of ranks or counts, as ``by``).
        by: ``rank`` or ``count`` (:func:`frequency_values`).

    Returns:
        One row per cell, frequency-major: ``frequency, position, tokens, mean_diff`` (model −
        baseline) and ``win_ratio`` (share of tokens the model scores higher); None for an empty cell.

    Raises:
        DataError: inputs that do not align sentence by sentence or token by token, a value below the
            first edge of its buckets, or a bad ``by``.
    """
    check_same_length("tokenwise: baseline scores", base_scores, len(model_scores), "sentences")
    check_same_length("tokenwise: gold tokens", gold, len(model_scores), "sentences")
    freq = frequency_values(gold, counts, by)
    cells: dict[tuple[int, int], list[float]] = {}
    for i, (a, b, g) in enumerate(zip(model_scores, base_scores, gold)):
        if not len(a) == len(b) == len(g):
            raise DataError(f"tokenwise: sentence {i} has {len(a)}/{len(b)} scores for {len(g)} gold tokens")
        for j in range(len(g)):
            key = (freq_buckets.index(freq[i][j]), position_buckets.index(j + 1))
            cells.setdefault(key, []).append(float(a[j]) - float(b[j]))
    rows = []
    for f, f_label in enumerate(freq_buckets.labels()):
        for p, p_label in enumerate(position_buckets.labels()):
            d = np.array(cells.get((f, p), []))
            mean = float(d.mean()) if d.size else None
            win = float((d > 0).mean()) if d.size else None
            rows.append({"frequency": f_label, "position": p_label, "tokens": int(d.size), "mean_diff": mean,
                         "win_ratio": win})
    return rows


def tokenwise(
    model: nn.Module,
    baseline: nn.Module,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    counts: Mapping[int, int],
    out_dir: str | Path,
    bos_id: int,
    eos_id: int,
    pad_id: int = 0,
    position_buckets: Buckets = POSITION_BUCKETS,
    freq_buckets: Buckets = RANK_BUCKETS,
    by: str = "rank",
    names: tuple[str, str] = ("model", "baseline"),
    batch_size: int = 32,
    baseline_pairs: Sequence[tuple[Sequence[int], Sequence[int]]] | None = None,
) -> list[dict[str, Any]]:
    """Score gold tokens with both models → ``tokenwise.csv`` and ``tokenwise.png``.

    Args:
        model: the model compared (a sequence-to-sequence model, put in eval mode).
        baseline: the model it is compared with.
        pairs: (source ids, target ids without BOS/EOS) per test sentence, in ``model``'s source format.
        counts: training target token counts (:func:`token_counts`).
        out_dir: the output directory (created if needed).
        bos_id: the tokenizer's BOS id.
        eos_id: the tokenizer's EOS id.
        pad_id: the tokenizer's padding id.
        position_buckets: the decoder-position buckets.
        freq_buckets: the frequency buckets.
        by: ``rank`` or ``count`` (:func:`frequency_values`).
        names: (model, baseline) names for the plot's titles.
        batch_size: pairs per forward pass.
        baseline_pairs: the same pairs in the baseline's own source format, when it differs (e.g. a
            source BOS); None: ``pairs``.

    Returns:
        The rows of :func:`tokenwise_table`.

    Raises:
        DataError: ``baseline_pairs`` with other targets than ``pairs``, or a bad ``by``.
    """
    if baseline_pairs is not None and [t for _, t in baseline_pairs] != [t for _, t in pairs]:
        raise DataError("tokenwise: baseline_pairs must have the same targets as pairs")
    a = gold_logprobs(model, pairs, bos_id, eos_id, pad_id, batch_size)
    b = gold_logprobs(baseline, baseline_pairs if baseline_pairs is not None else pairs, bos_id, eos_id, pad_id,
                      batch_size)
    gold = [[*tgt, eos_id] for _, tgt in pairs]
    rows = tokenwise_table(a, b, gold, counts, position_buckets, freq_buckets, by)
    out = plots.output_dir(out_dir)
    plots.write_csv(out / "tokenwise.csv", rows)
    plot_tokenwise(rows, freq_buckets.labels(), position_buckets.labels(), names, by, out / "tokenwise.png")
    return rows


def plot_tokenwise(
    rows: list[dict[str, Any]], f_labels: list[str], p_labels: list[str], names: tuple[str, str], by: str, path: Path
) -> None:
    """Draw the rows of :func:`tokenwise_table` as two heatmaps: the mean log-prob difference and the
    share of tokens the model wins.

    Args:
        rows: the rows, frequency-major.
        f_labels: the frequency buckets' labels (the heatmaps' rows).
        p_labels: the position buckets' labels (the heatmaps' columns).
        names: (model, baseline) names for the titles.
        by: ``rank`` or ``count`` (the y axis label).
        path: the PNG file to write.
    """
    shape = (len(f_labels), len(p_labels))
    diff = np.array([np.nan if r["mean_diff"] is None else r["mean_diff"] for r in rows]).reshape(shape)
    win = np.array([np.nan if r["win_ratio"] is None else r["win_ratio"] for r in rows]).reshape(shape)
    bound = float(np.nanmax(np.abs(diff))) if np.isfinite(diff).any() else 1.0
    fig, (ax1, ax2) = plots.figure(ncols=2, size=(6.0, 3.8))
    ylabel = "frequency rank" if by == "rank" else "training count"
    plots.heatmap(ax1, diff, f_labels, p_labels, f"mean log-prob difference ({names[0]} − {names[1]})", cmap="RdBu",
                  vmin=-bound, vmax=bound, xlabel="decoder position", ylabel=ylabel)
    plots.heatmap(ax2, win, f_labels, p_labels, f"ratio {names[0]} > {names[1]}", cmap="RdBu", vmin=0.0, vmax=1.0,
                  xlabel="decoder position", ylabel=ylabel)
    plots.save_png(fig, path)
