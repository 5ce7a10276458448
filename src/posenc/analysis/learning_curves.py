"""Learning curves (SHAPE Fig. 8/9): validation perplexity against steps and against wall clock,
one line per run, with each run's convergence status in the legend and in ``curves.md``.

The statuses come from :mod:`posenc.training.convergence` (the one rule: converged = stopped by
patience with the best validation after warm-up); this module only draws them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from posenc.analysis.plots import figure, markdown_table, model_colors, output_dir, save_png
from posenc.training.convergence import CONVERGED, UNKNOWN


def learning_curves(curves: Mapping[str, Sequence[Mapping[str, float]]], status: Mapping[str, str], out: str | Path) -> Path:
    """``curves``: run name → valid.csv rows (step, ppl, wall_s); ``status``: run name → status.
    Writes ``learning_curves.png`` (two panels) and ``curves.md``; returns the output directory."""
    out = output_dir(out)
    fig, (by_step, by_time) = figure(ncols=2, size=(11.0, 3.8))
    colors = model_colors(list(curves))
    for name, rows in curves.items():
        if not rows:
            continue
        label = f"{name} ({status.get(name, UNKNOWN)})"
        style = "-" if status.get(name) == CONVERGED else "--"
        by_step.plot([r["step"] for r in rows], [r["ppl"] for r in rows], style, color=colors[name], label=label, marker=".")
        by_time.plot([r["wall_s"] for r in rows], [r["ppl"] for r in rows], style, color=colors[name], label=label, marker=".")
    for ax, xlabel in ((by_step, "training steps"), (by_time, "training wall clock (s)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("validation perplexity")
        ax.set_yscale("log")
    by_step.legend(fontsize=7)
    save_png(fig, out / "learning_curves.png")
    rows = [{"run": n, "validations": len(r), "last step": int(r[-1]["step"]) if r else "–",
             "best ppl": round(min(x["ppl"] for x in r), 3) if r else "–",
             "last ppl": round(r[-1]["ppl"], 3) if r else "–", "status": status.get(n, UNKNOWN)}
            for n, r in curves.items()]
    (out / "curves.md").write_text(
        "Dashed lines: runs that did not converge (stopped by the step cap: \"still improving\"; best validation "
        "in warm-up; or no stop reason recorded: \"unknown\"). Converged = stopped by patience with the best "
        "validation after warm-up.\n\n"
        + markdown_table(rows, ["run", "validations", "last step", "best ppl", "last ppl", "status"]) + "\n",
        encoding="utf-8")
    return out
