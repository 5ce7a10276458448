"""Shared output helpers for the analyses: CSV/Markdown writers and matplotlib plots.

All plotting goes through this module (Agg backend, one style, PNG at 150 dpi), so the
analyses only arrange data. Floats are written to CSV rounded to 6 decimals; ``None`` and NaN
are written as empty cells.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import patheffects  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

DPI = 150
GREY = "#d9d9d9"


def output_dir(path: str | Path) -> Path:
    """Create (if needed) an output directory.

    Args:
        path: the directory.

    Returns:
        ``path``, as a path, existing.
    """
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    return p


def safe_name(name: str) -> str:
    """A file-name-safe version of a model name.

    Args:
        name: a model or method name (may hold ``+``, ``/``, spaces).

    Returns:
        ``name`` with every character other than letters, digits, ``-``, ``_`` and ``.`` replaced by ``_``.
    """
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def cell(value: Any) -> str:
    """Text of one CSV/Markdown cell.

    Args:
        value: any value of a table row (float, int, numpy scalar, str, None).

    Returns:
        Floats rounded to 6 decimals, numpy integers as ints, None and NaN as an empty string, anything
        else as ``str``.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (float, np.floating)):
        return repr(round(float(value), 6))
    if isinstance(value, np.integer):
        return str(int(value))
    return str(value)


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> Path:
    """Write rows as a CSV file with a header.

    Args:
        path: the file to write (replaced).
        rows: the rows, as dicts of column → value (:func:`cell` gives each cell's text; a missing key
            is an empty cell).
        columns: the columns, in order; by default the first row's keys.

    Returns:
        ``path``, as a path.
    """
    cols = list(columns) if columns is not None else list(rows[0]) if rows else []
    p = Path(path)
    with p.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(cols)
        for row in rows:
            writer.writerow([cell(row.get(c)) for c in cols])
    return p


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A GitHub-flavoured Markdown table.

    Args:
        rows: the rows, as dicts of column → value (:func:`cell` gives each cell's text).
        columns: the columns, in order.

    Returns:
        The table's text, header and separator included, ending with a newline.
    """
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_markdown(path: str | Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Path:
    """Write rows as a Markdown table file (:func:`markdown_table`).

    Args:
        path: the file to write (replaced).
        rows: the rows, as dicts of column → value.
        columns: the columns, in order.

    Returns:
        ``path``, as a path.
    """
    p = Path(path)
    p.write_text(markdown_table(rows, columns), encoding="utf-8")
    return p


def figure(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (5.5, 3.6)) -> tuple[Figure, list[Axes]]:
    """A new figure in the shared style (no top/right spines, light grid).

    Args:
        ncols: columns of axes.
        nrows: rows of axes.
        size: (width, height) of one panel in inches.

    Returns:
        ``(figure, axes)``: the ``nrows × ncols`` axes as a flat list, row by row.
    """
    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False)
    for ax in axes.flat:
        ax.spines["top"].set_visible(False)
        ax.spines["right"].set_visible(False)
        ax.grid(True, alpha=0.3)
    return fig, list(axes.flat)


def save_png(fig: Figure, path: str | Path) -> Path:
    """Save a figure as PNG at :data:`DPI` (tight layout) and close it.

    Args:
        fig: the figure.
        path: the PNG file to write (replaced).

    Returns:
        ``path``, as a path.
    """
    p = Path(path)
    fig.tight_layout()
    fig.savefig(p, dpi=DPI, format="png")
    plt.close(fig)
    return p


def shade(ax: Axes, indices: Sequence[int], label: str = "no training data") -> None:
    """Grey background behind categorical x positions (e.g. the buckets of unseen lengths).

    Args:
        ax: the axes to draw on.
        indices: the x positions (category indices) to shade.
        label: the legend label of the shading (given once).
    """
    for n, i in enumerate(indices):
        ax.axvspan(i - 0.5, i + 0.5, color=GREY, zorder=0, label=label if n == 0 else None)


def model_colors(names: Sequence[str]) -> dict[str, str]:
    """One fixed colour per model, so a model looks the same in every panel of a figure.

    Args:
        names: the models, in the order they are drawn.

    Returns:
        Name → matplotlib colour (``C0`` .. ``C9``, cycling).
    """
    return {name: f"C{i % 10}" for i, name in enumerate(names)}


def lines(
    ax: Axes,
    series: Mapping[str, tuple[Sequence[float], Sequence[float | None]]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    markers: bool = True,
    colors: Mapping[str, str] | None = None,
) -> None:
    """One line per named series, with a legend when there is a series.

    Args:
        ax: the axes to draw on.
        series: name → ``(x, y)``; ``None`` y values leave gaps.
        xlabel: the x axis label.
        ylabel: the y axis label.
        title: the axes title ("": none).
        markers: draw a marker at each point.
        colors: name → colour (e.g. :func:`model_colors`); matplotlib's cycle for names not in it.
    """
    for name, (x, y) in series.items():
        yy = [np.nan if v is None else v for v in y]
        color = colors.get(name) if colors else None
        ax.plot(list(x), yy, marker="o" if markers else None, markersize=3, label=name, color=color)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if series:
        ax.legend(frameon=False, fontsize=8)


def categorical_lines(
    ax: Axes, categories: Sequence[str], series: Mapping[str, Sequence[float | None]], xlabel: str, ylabel: str,
    title: str = "", colors: Mapping[str, str] | None = None,
) -> None:
    """Lines over categorical x positions (buckets), with the category names as tick labels.

    Args:
        ax: the axes to draw on.
        categories: the x tick labels, one per position.
        series: name → one y value per category (``None``: a gap).
        xlabel: the x axis label.
        ylabel: the y axis label.
        title: the axes title ("": none).
        colors: name → colour; matplotlib's cycle for names not in it.
    """
    lines(ax, {n: (range(len(categories)), y) for n, y in series.items()}, xlabel, ylabel, title, colors=colors)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=45 if len(categories) > 6 else 0,
                       ha="right" if len(categories) > 6 else "center")


def bars(
    ax: Axes, categories: Sequence[str], series: Mapping[str, Sequence[float | None]], xlabel: str, ylabel: str,
    title: str = "", colors: Mapping[str, str] | None = None,
) -> None:
    """Grouped bars: one group per category, one bar per named series, a line at zero.

    Args:
        ax: the axes to draw on.
        categories: the x tick labels, one per group.
        series: name → one value per category (``None``: no bar).
        xlabel: the x axis label.
        ylabel: the y axis label.
        title: the axes title ("": none).
        colors: name → colour; matplotlib's cycle for names not in it.
    """
    n = max(len(series), 1)
    width = 0.8 / n
    for k, (name, values) in enumerate(series.items()):
        x = np.arange(len(categories)) + (k - (n - 1) / 2) * width
        color = colors.get(name) if colors else None
        ax.bar(x, [np.nan if v is None else v for v in values], width, label=name, color=color)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=45 if len(categories) > 6 else 0,
                       ha="right" if len(categories) > 6 else "center")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.axhline(0, color="black", linewidth=0.6)
    if title:
        ax.set_title(title)
    if series:
        ax.legend(frameon=False, fontsize=8)


def heatmap(
    ax: Axes,
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str = "",
    fmt: str = "{:.2f}",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotations: Sequence[Sequence[str]] | None = None,
    xlabel: str = "",
    ylabel: str = "",
) -> None:
    """Annotated heatmap of a matrix, with a colour bar; NaN cells are blank and annotated "n/a".

    Args:
        ax: the axes to draw on.
        matrix: the values, ``(R, C)``.
        row_labels: R y tick labels.
        col_labels: C x tick labels.
        title: the axes title ("": none).
        fmt: the format of each cell's annotation.
        cmap: the matplotlib colour map.
        vmin: the value of the colour map's low end (None: the matrix's minimum).
        vmax: the value of the colour map's high end (None: the matrix's maximum).
        annotations: ``(R, C)`` texts written in the cells instead of the formatted values.
        xlabel: the x axis label.
        ylabel: the y axis label.
    """
    m = np.asarray(matrix, dtype=float)
    image = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.figure.colorbar(image, ax=ax)
    ax.set_xticks(range(len(col_labels)))
    ax.set_xticklabels(col_labels, rotation=45 if len(col_labels) > 6 else 0,
                       ha="right" if len(col_labels) > 6 else "center")
    ax.set_yticks(range(len(row_labels)))
    ax.set_yticklabels(row_labels)
    ax.grid(False)
    outline = [patheffects.withStroke(linewidth=2, foreground="white")]
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            text = (annotations[i][j] if annotations is not None
                    else ("n/a" if not np.isfinite(m[i, j]) else fmt.format(m[i, j])))
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color="black", path_effects=outline)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)


def histogram(
    ax: Axes, values: Mapping[str, Sequence[int]], bins: Sequence[float], xlabel: str, ylabel: str = "sentences",
    title: str = "",
) -> None:
    """Overlaid step histograms, one per named series.

    Args:
        ax: the axes to draw on.
        values: name → integer values (e.g. output lengths).
        bins: the bin edges.
        xlabel: the x axis label.
        ylabel: the y axis label.
        title: the axes title ("": none).
    """
    for name, v in values.items():
        ax.hist(list(v), bins=list(bins), histtype="step", linewidth=1.2, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if values:
        ax.legend(frameon=False, fontsize=8)
