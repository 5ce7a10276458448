"""The vision report: ``results.csv`` (run, eval, resolution, accuracy) and ``accuracy.png``
(accuracy against test resolution) of the runs :mod:`posenc.tasks.vision.driver` trained."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any


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
