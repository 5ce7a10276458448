"""The speech report: ``results.csv`` (one row per method and duration bucket),
``wer_by_duration.png`` (WER against duration, CAPE Fig. 5 style) and ``README.md`` (per method:
mean ± sd over seeds of the WER in every bucket, the mean over durations never seen in training,
steps and convergence status)."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Any, Sequence

from posenc.evaluation.seeds import mean_std


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


def write_summary(name: str, results: Sequence[dict[str, Any]], longest: float, out: Path) -> str:
    """``README.md``: per method, WER (%) of every bucket as mean ± sd over its seeds, and the
    mean over the fixed-duration buckets longer than ``longest`` (training maximum, seconds)."""
    buckets = list(dict.fromkeys(row["bucket"] for r in results for row in r["metrics"]["rows"]))
    longer = {row["bucket"] for r in results for row in r["metrics"]["rows"]
              if row["bucket"] != "clips" and float(row["duration_s"]) > longest}
    unseen = [b for b in buckets if b in longer]  # in bucket order
    seeds = sorted({r["seed"] for r in results})
    lines = [f"# {name}", "", f"WER (%) by test bucket, mean ± sd over seeds {seeds}; training utterances are at "
             f"most {longest:g} s, so {', '.join(unseen) or 'no bucket'} are durations never seen in training "
             "('unseen': their mean). Status: posenc.training.convergence ('still improving' = stopped by its "
             "step/epoch cap).", "", f"| method | {' | '.join(buckets)} | unseen | steps | status |",
             "|---" * (len(buckets) + 4) + "|"]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by.setdefault(r["method"], []).append(r)
    for method, runs in by.items():
        wer = [{row["bucket"]: float(row["wer"]) for row in r["metrics"]["rows"]} for r in runs]
        cells = [mean_std([w[b] for w in wer], 1) for b in buckets]
        cells.append(mean_std([statistics.fmean(w[b] for b in unseen) for w in wer], 1) if unseen else "–")
        steps = "/".join(map(str, sorted({int(r["summary"].get("steps", 0)) for r in runs})))
        status = ", ".join(sorted({str(r["summary"].get("status", "unknown")) for r in runs}))
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {steps} | {status} |")
    text = "\n".join(lines) + "\n"
    (out / "README.md").write_text(text, encoding="utf-8")
    return text
