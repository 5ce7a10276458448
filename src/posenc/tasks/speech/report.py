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


def plot_wer(rows: Sequence[dict[str, Any]], path: Path, train_max: float | None = None) -> None:
    """WER vs duration (log x) per method, fixed-duration buckets only (CAPE Fig. 5 style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method in dict.fromkeys(r["method"] for r in rows):
        pts = [(r["duration_s"], r["wer"]) for r in rows if r["method"] == method and r["bucket"] != "clips"]
        ax.plot(*zip(*pts), marker="o", label=method)
    if train_max:
        ax.axvline(train_max, color="grey", ls="--", lw=1, label="longest training")
    ax.set(xscale="log", xlabel="utterance duration (s)", ylabel="WER (%)", title="FSDD CTC: WER by duration")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
