"""The vision report: ``results.csv`` (run, eval, resolution, accuracy), ``accuracy.png``
(accuracy against test resolution) and ``README.md`` (per method: mean ± sd over seeds at every
test resolution, TTA, the mean over the resolutions a model never trained at, steps and
convergence status) of the runs :mod:`posenc.tasks.vision.task` trained."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Any, Sequence

from posenc.evaluation.seeds import mean_std


def result_rows(name: str, metrics: dict[str, Any], train_resolution: int) -> list[dict[str, Any]]:
    """CSV rows of one run: one per test resolution (JSON keys: text), plus the TTA row."""
    rows = [{"run": name, "eval": "single", "resolution": int(r), "accuracy": a}
            for r, a in metrics["accuracy"].items()]
    tta = "tta:" + "/".join(map(str, metrics["tta_resolutions"]))
    return rows + [{"run": name, "eval": tta, "resolution": train_resolution, "accuracy": metrics["tta"]}]


def write_report(results: list[dict[str, Any]], out_dir: Path, train_resolution: int) -> list[dict[str, Any]]:
    """results.csv and accuracy.png of ``results`` (each with ``run`` and ``metrics``); the rows."""
    rows = [row for r in results for row in result_rows(r["run"], r["metrics"], train_resolution)]
    write_csv(rows, out_dir / "results.csv")
    plot_accuracy(rows, out_dir / "accuracy.png", train_resolution=train_resolution)
    return rows


def write_csv(rows: list[dict[str, Any]], path: str | Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["run", "eval", "resolution", "accuracy"])
        writer.writeheader()
        writer.writerows(rows)


def plot_accuracy(rows: list[dict[str, Any]], path: str | Path, train_resolution: int) -> None:
    """Accuracy vs test resolution, one line per run (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name in dict.fromkeys(r["run"] for r in rows):
        pts = sorted((r["resolution"], r["accuracy"]) for r in rows if r["run"] == name and r["eval"] == "single")
        ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", linestyle="--" if "univit" in name else "-",
                label=name)
    ax.axvline(train_resolution, color="grey", linewidth=0.8)
    ax.set_xlabel("test resolution (px)")
    ax.set_ylabel("top-1 accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def unseen(resolutions: Sequence[int], train_resolution: int, univit: Sequence[int] | None) -> list[int]:
    """The test resolutions a model never trained at: all but ``train_resolution``; for a UniViT
    model (trained at every resolution in ``univit``) those outside the range of ``univit``."""
    if univit:
        return [r for r in resolutions if r < min(univit) or r > max(univit)]
    return [r for r in resolutions if r != train_resolution]


def _percent(values: Sequence[float]) -> str:
    """Accuracies (fractions) over seeds as ``mean ± sd`` in percent."""
    return mean_std(values, 1, 100)


def method_row(method: str, runs: Sequence[dict[str, Any]], resolutions: Sequence[int],
               unseen_at: Sequence[int]) -> str:
    """One Markdown row: accuracy by resolution, TTA, unseen-resolution mean, steps, statuses."""
    cells = [_percent([r["metrics"]["accuracy"][str(res)] for r in runs]) for res in resolutions]
    cells.append(_percent([r["metrics"]["tta"] for r in runs]))
    cells.append(_percent([statistics.fmean(r["metrics"]["accuracy"][str(res)] for res in unseen_at) for r in runs])
                 if unseen_at else "–")
    steps = sorted({int(r["summary"].get("steps", 0)) for r in runs})
    status = ", ".join(sorted({str(r["summary"].get("status", "unknown")) for r in runs}))
    return f"| {method} | " + " | ".join(cells) + f" | {'/'.join(map(str, steps))} | {status} |"


def write_summary(name: str, results: Sequence[dict[str, Any]], train_resolution: int,
                  univit: dict[str, list[int]], out: Path) -> str:
    """``README.md`` of the report: per method, mean ± sd over its seeds (``univit``: method →
    the UniViT training resolutions, empty for a single-resolution model); returns the text."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by.setdefault(r["method"], []).append(r)
    resolutions = sorted({int(k) for r in results for k in r["metrics"]["accuracy"]})
    seeds = sorted({r["seed"] for r in results})
    head = " | ".join(f"{res}{'*' if res == train_resolution else ''}" for res in resolutions)
    lines = [f"# {name}", "",
             f"Top-1 accuracy (%) by test resolution (px), mean ± sd over seeds {seeds}; models trained at "
             f"{train_resolution} px (*), UniViT models at several. 'unseen' averages the resolutions a model never "
             "trained at (UniViT: outside its training range). Status: the convergence rule of "
             "posenc.training.convergence ('still improving' = stopped by its step/epoch cap).", "",
             f"| method | {head} | TTA | unseen | steps | status |", "|---" * (len(resolutions) + 5) + "|"]
    for method, runs in by.items():
        unseen_at = unseen(resolutions, train_resolution, univit.get(method))
        lines.append(method_row(method, runs, resolutions, unseen_at))
    text = "\n".join(lines) + "\n"
    (out / "README.md").write_text(text, encoding="utf-8")
    return text
