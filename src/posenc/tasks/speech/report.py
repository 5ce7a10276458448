"""The speech experiment: one CTC model per entry of ``methods`` trained through the one
Trainer, then ``results.csv`` (one row per method and duration bucket) and
``wer_by_duration.png`` (WER against duration, CAPE Fig. 5 style)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Callable, Sequence

from posenc.tasks.base import run_task
from posenc.tasks.speech.config import SpeechConfig, with_method


def run_experiment(cfg: SpeechConfig, task: Any = None, echo: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Train and evaluate one model per method (``cfg.methods``, or the configured position) in
    ``out_dir/runs/<method>`` (resumable); write results.csv and wer_by_duration.png."""
    from posenc.tasks.speech.task import SpeechTask

    task = task or SpeechTask()
    echo = echo or (lambda text: print(text, flush=True))
    out, rows = Path(cfg.out_dir), []
    for method in cfg.methods or [cfg.model.position.name]:
        mcfg = with_method(cfg, method)
        done = run_task(task, mcfg, out / "runs" / method)
        train = done.result.train
        final = sum(r["loss"] for r in train[-20:]) / max(1, len(train[-20:]))
        params = sum(p.numel() for p in done.model.parameters())
        for r in done.metrics["rows"]:
            r.update(train_s=round(done.result.state.wall_s, 1), final_loss=round(final, 4), params=params)
        rows += done.metrics["rows"]
        echo(f"[{method}] {done.result.state.step} steps: " + ", ".join(f"{r['bucket']} WER {r['wer']}" for r in done.metrics["rows"]))
        write_csv(rows, out / "results.csv")
    write_report(cfg, rows, out)
    return rows


def write_report(cfg: SpeechConfig, rows: Sequence[dict[str, Any]], out: Path) -> None:
    write_csv(rows, out / "results.csv")
    plot_wer(rows, out / "wer_by_duration.png", cfg.data.max_train_duration)


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
