"""Learning curves (SHAPE Fig. 8/9): validation perplexity against steps and against wall clock,
and validation loss zoomed on the last part of training, with each run's convergence status and
the slope of its validation curve at the end in ``curves.md``.

Runs are named ``<method>/seed<N>``: the colour is the method, the line style the seed (so a method's
seeds read as one colour on the log axis), and the last point of a run that did not converge is
a cross. The statuses come from :mod:`posenc.training.convergence` (the
one rule); this module only draws them and fits the end slope (``end_slope``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from posenc.analysis.plots import figure, markdown_table, model_colors, output_dir, save_png
from posenc.training.convergence import CONVERGED, UNKNOWN
from posenc.training.stopping import FLAT_WINDOW, end_slope

SEED_STYLES = ("-", "--", ":", "-.")
#: The zoomed panel shows the last this fraction of the longest run's steps.
ZOOM_FRACTION = 0.4


def method_of(name: str) -> str:
    """The method of a run name (``ape`` of ``ape/seed1``).

    Args:
        name: a run name, ``<method>/seed<N>`` or a bare method.

    Returns:
        The part before ``/seed<N>``; a name without ``/seed<N>`` is its own method.
    """
    head, _, tail = name.rpartition("/seed")
    return head if head and tail.isdigit() else name


def seed_index(name: str) -> int:
    """The position of a run's seed, which picks its line style.

    Args:
        name: a run name, ``<method>/seed<N>`` or a bare method.

    Returns:
        ``N - 1`` for ``.../seed<N>`` (0 for ``seed0`` and for a name without a seed).
    """
    _, _, tail = name.rpartition("/seed")
    return max(int(tail) - 1, 0) if tail.isdigit() else 0


def _loss(row: Mapping[str, float]) -> float:
    return float(row["loss"]) if "loss" in row else math.log(float(row["ppl"]))


def _draw(axes: Sequence, curves: Mapping[str, Sequence[Mapping[str, float]]], status: Mapping[str, str]) -> None:
    """Panels (by step, zoom on the end by step, by wall clock): colour = method, style = seed."""
    methods = list(dict.fromkeys(method_of(n) for n in curves))
    colors = model_colors(methods)
    end = max((r[-1]["step"] for r in curves.values() if r), default=0.0)
    start = end * (1.0 - ZOOM_FRACTION)
    by_step, zoom, by_time = axes
    for name, rows in curves.items():
        if not rows:
            continue
        method = method_of(name)
        style = SEED_STYLES[seed_index(name) % len(SEED_STYLES)]
        done = status.get(name) == CONVERGED
        kw = dict(color=colors[method], linestyle=style, linewidth=1.2)
        by_step.plot([r["step"] for r in rows], [r["ppl"] for r in rows],
                     label=f"{name} ({status.get(name, UNKNOWN)})", **kw)
        by_time.plot([r["wall_s"] for r in rows], [r["ppl"] for r in rows], **kw)
        tail = [r for r in rows if r["step"] >= start]
        zoom.plot([r["step"] for r in tail], [_loss(r) for r in tail], marker=".", markersize=3, **kw)
        if tail:
            zoom.plot([tail[-1]["step"]], [_loss(tail[-1])], marker="o" if done else "x", color=colors[method],
                      markersize=6, linestyle="none")
            _fit_line(zoom, rows, colors[method])
    for ax, xlabel, ylabel in ((by_step, "training steps", "validation perplexity (log)"),
                               (zoom, f"training steps (last {ZOOM_FRACTION:.0%})", "validation loss (nats)"),
                               (by_time, "training wall clock (s)", "validation perplexity (log)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    by_step.set_yscale("log")
    by_time.set_yscale("log")
    zoom.set_xlim(left=start)
    zoom.set_title(f"end of training: o converged, x not; faint: fit of the last {FLAT_WINDOW} validations", fontsize=8)
    by_step.legend(fontsize=6, frameon=False)


def _fit_line(ax, rows: Sequence[Mapping[str, float]], color: str) -> None:  # noqa: ANN001 - a matplotlib Axes
    """The least-squares line through the last FLAT_WINDOW validation losses (the "end slope"), thick and faint."""
    last = [(float(r["step"]), _loss(r)) for r in rows][-FLAT_WINDOW:]
    fit = end_slope(last)
    if fit is None:
        return
    mx, my = sum(x for x, _ in last) / len(last), sum(y for _, y in last) / len(last)
    xs = [last[0][0], last[-1][0]]
    ax.plot(xs, [my + fit[0] / 1000.0 * (x - mx) for x in xs], color=color, linewidth=4, alpha=0.25)


def _table_row(name: str, rows: Sequence[Mapping[str, float]], status: Mapping[str, str]) -> dict[str, object]:
    fit = end_slope([[r["step"], _loss(r)] for r in rows])
    return {"run": name, "validations": len(rows), "last step": int(rows[-1]["step"]) if rows else "–",
            "best ppl": round(min(x["ppl"] for x in rows), 3) if rows else "–",
            "last ppl": round(rows[-1]["ppl"], 3) if rows else "–",
            "end slope (nats/1k updates)": f"{fit[0]:+.4f} ± {fit[1]:.4f}" if fit else "–",
            "status": status.get(name, UNKNOWN)}


def learning_curves(
    curves: Mapping[str, Sequence[Mapping[str, float]]], status: Mapping[str, str], out: str | Path
) -> Path:
    """Draw the runs' validation curves and tabulate their convergence.

    Writes ``learning_curves.png`` (three panels: perplexity by step, loss zoomed on the end of
    training, perplexity by wall clock) and ``curves.md`` (per run: validations, last step, best and
    last perplexity, end slope and status).

    Args:
        curves: run name (``method/seedN``) → its valid.csv rows (``step``, ``ppl``, ``wall_s``, and
            ``loss`` in nats, else taken as log ``ppl``), in step order.
        status: run name → its convergence status (:mod:`posenc.training.convergence`; ``unknown``
            where missing).
        out: the output directory (created if needed).

    Returns:
        The output directory.
    """
    out = output_dir(out)
    fig, axes = figure(ncols=3, size=(5.2, 3.9))
    _draw(axes, curves, status)
    save_png(fig, out / "learning_curves.png")
    rows = [_table_row(n, r, status) for n, r in curves.items()]
    (out / "curves.md").write_text(
        "Colour: method; line style: seed. Middle panel: the last part of training on a linear loss axis, the "
        "last validation of each run drawn o (converged) or x (not). Converged = stopped by patience before the "
        "step cap, with the best validation after warm-up and a flat end: the least-squares slope of the last "
        f"{FLAT_WINDOW} validation losses (\"end slope\", ± its standard error) not significantly below zero "
        "(training/convergence.py). Not converged: \"still improving\" (reached the step cap), \"not flat\", "
        "\"best in warm-up\" or \"unknown\" (no stop reason recorded).\n\n"
        + markdown_table(rows, ["run", "validations", "last step", "best ppl", "last ppl",
                                "end slope (nats/1k updates)", "status"]) + "\n",
        encoding="utf-8")
    return out
