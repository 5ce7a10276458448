"""The speech report: ``results.csv`` (one row per method and duration bucket) and
``wer_by_duration.png`` (WER against duration, CAPE Fig. 5 style)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Sequence


def write_report(rows: Sequence[dict[str, Any]], out: Path, longest_training: float | None = None) -> None:
    """results.csv and wer_by_duration.png (a line at ``longest_training`` seconds) under ``out``."""
    write_csv(rows, out / "results.csv")
    plot_wer(rows, out / "wer_by_duration.png", longest_training)


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def wer_curves(rows: Sequence[dict[str, Any]]) -> dict[str, list[tuple[float, float, float, float]]]:
    """Per method, ``(duration_s, mean WER, min, max)`` over its seeds for each fixed-duration
    bucket (the natural-length ``clips`` bucket left out), sorted by duration."""
    by: dict[str, dict[float, list[float]]] = {}
    for r in rows:
        if r["bucket"] != "clips":
            by.setdefault(r["method"], {}).setdefault(float(r["duration_s"]), []).append(float(r["wer"]))
    return {m: [(d, sum(w) / len(w), min(w), max(w)) for d, w in sorted(points.items())] for m, points in by.items()}


def plot_wer(rows: Sequence[dict[str, Any]], path: Path, train_max: float | None = None) -> None:
    """WER vs duration (log x) per method: the mean over seeds, their range shaded (CAPE Fig. 5
    style; fixed-duration buckets only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, pts in wer_curves(rows).items():
        d, mean, lo, hi = zip(*pts)
        (line,) = ax.plot(d, mean, marker="o", label=method)
        if lo != hi:
            ax.fill_between(d, lo, hi, color=line.get_color(), alpha=0.15, lw=0)
    if train_max:
        ax.axvline(train_max, color="grey", ls="--", lw=1, label="longest training")
    ax.set(xscale="log", xlabel="utterance duration (s)", ylabel="WER (%) (mean over seeds; range shaded)",
           title="FSDD CTC: WER by duration")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
