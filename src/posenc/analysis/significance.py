"""Pairwise significance of BLEU differences by paired bootstrap (Neishi & Yoshinaga Table 4).

For every pair of models one paired bootstrap (Koehn 2004, via
:func:`posenc.evaluation.bootstrap.paired_bootstrap`) gives p-values for "row is better" and
"column is better"; the table shows ``>>``/``<<`` for p < 0.01, ``>``/``<`` for p < 0.05 and
``~`` otherwise, read as "row model vs column model".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from posenc.analysis import plots
from posenc.errors import DataError
from posenc.evaluation.bootstrap import paired_bootstrap

STRONG, WEAK = 0.01, 0.05


def symbol(p_row_better: float, p_col_better: float) -> str:
    """Neishi Table 4 notation for row vs column.

    Args:
        p_row_better: the paired bootstrap's p-value of "the row model is better" (the share of
            resamples in which it is not ahead).
        p_col_better: the same for "the column model is better".

    Returns:
        ``>>``/``<<`` when the row/column model is better at p < 0.01, ``>``/``<`` at p < 0.05,
        ``~`` otherwise.
    """
    if p_row_better < STRONG:
        return ">>"
    if p_col_better < STRONG:
        return "<<"
    if p_row_better < WEAK:
        return ">"
    if p_col_better < WEAK:
        return "<"
    return "~"


def flip(sym: str) -> str:
    """The same comparison read from the other model's side.

    Args:
        sym: a :func:`symbol` of row vs column.

    Returns:
        ``sym`` with ``<`` and ``>`` swapped (column vs row).
    """
    return sym.translate(str.maketrans("<>", "><"))


def pairwise(hyps: Mapping[str, Sequence[str]], refs: Sequence[str], n_samples: int, seed: int) -> list[dict[str, Any]]:
    """One paired bootstrap per unordered pair of models.

    Args:
        hyps: model name → its outputs, aligned with ``refs``.
        refs: the references.
        n_samples: bootstrap resamples.
        seed: the resampling generator's seed (the same for every pair).

    Returns:
        One row per pair ``(a, b)``, ``a`` before ``b`` in the given model order: ``a, b, bleu_a,
        bleu_b``, their 95 % intervals ``ci_a_low, ci_a_high, ci_b_low, ci_b_high``, ``p_a_better,
        p_b_better`` and ``symbol`` (a vs b).
    """
    names = list(hyps)
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            r = paired_bootstrap(hyps[a], hyps[b], refs, n_samples=n_samples, seed=seed)
            p_a = float(r["p_value"])
            p_b = (r["n_samples"] - r["wins_b"]) / r["n_samples"]
            rows.append({
                "a": a, "b": b, "bleu_a": r["bleu_a"], "bleu_b": r["bleu_b"],
                "ci_a_low": r["ci_a"][0], "ci_a_high": r["ci_a"][1],
                "ci_b_low": r["ci_b"][0], "ci_b_high": r["ci_b"][1],
                "p_a_better": p_a, "p_b_better": p_b, "symbol": symbol(p_a, p_b),
            })
    return rows


def matrix_rows(names: list[str], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of :func:`pairwise` in Table 4 layout.

    Args:
        names: the models, in table order.
        rows: the rows of :func:`pairwise` over them.

    Returns:
        One row per model: ``model``, its ``BLEU`` and one column per model holding the symbol of
        the row model vs that one (empty on the diagonal).
    """
    bleu = {r["a"]: r["bleu_a"] for r in rows} | {r["b"]: r["bleu_b"] for r in rows}
    sym = {(r["a"], r["b"]): r["symbol"] for r in rows} | {(r["b"], r["a"]): flip(r["symbol"]) for r in rows}
    return [{"model": m, "BLEU": bleu.get(m), **{c: sym.get((m, c), "") for c in names}} for m in names]


def bootstrap_table(
    hyps: Mapping[str, Sequence[str]],
    refs: Sequence[str],
    out_dir: str | Path,
    n_samples: int = 1000,
    seed: int = 12345,
) -> list[dict[str, Any]]:
    """Pairwise paired-bootstrap tests → ``bootstrap.csv``, ``bootstrap.md`` (Table 4 layout) and
    ``bootstrap.png`` (p of "row better" per pair).

    Args:
        hyps: model name → its outputs, aligned with ``refs``; at least two models.
        refs: the references.
        out_dir: the output directory (created if needed).
        n_samples: bootstrap resamples.
        seed: the resampling generator's seed.

    Returns:
        The rows of :func:`pairwise`, one per pair: ``a, b, bleu_a, bleu_b, ci_*, p_a_better,
        p_b_better, symbol``.

    Raises:
        DataError: fewer than two models.
    """
    names = list(hyps)
    if len(names) < 2:
        raise DataError(f"bootstrap: need at least two models, got {len(names)}")
    rows = pairwise(hyps, refs, n_samples, seed)
    out = plots.output_dir(out_dir)
    plots.write_csv(out / "bootstrap.csv", rows)
    table = matrix_rows(names, rows)
    plots.write_markdown(out / "bootstrap.md", table, ["model", "BLEU", *names])
    p = np.full((len(names), len(names)), np.nan)
    for r in rows:
        i, j = names.index(r["a"]), names.index(r["b"])
        p[i, j], p[j, i] = r["p_a_better"], r["p_b_better"]
    notes = [[table[i][c] for c in names] for i in range(len(names))]
    fig, (ax,) = plots.figure(size=(1.2 * len(names) + 2.5, 0.9 * len(names) + 1.5))
    plots.heatmap(ax, p, names, names, f"p(row better), {n_samples} resamples", cmap="viridis_r", vmin=0.0, vmax=1.0,
                  annotations=notes)
    plots.save_png(fig, out / "bootstrap.png")
    return rows
