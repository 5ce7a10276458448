"""The vision experiment: every method of ``experiment.methods`` (and the UniViT variants of
``experiment.univit_methods``) trained through the one Trainer, then ``results.csv`` (run, eval,
resolution, accuracy) and ``accuracy.png`` (accuracy against test resolution)."""

from __future__ import annotations

import copy
import csv
import logging
from pathlib import Path
from typing import Any, Callable

from posenc.config import save_yaml
from posenc.tasks.base import run_task
from posenc.tasks.vision.config import VisionConfig

log = logging.getLogger("posenc")


def run_configs(cfg: VisionConfig) -> list[tuple[str, VisionConfig]]:
    """(run name, config) for every method, then every UniViT variant, of ``cfg.experiment``."""
    runs = []
    for name in cfg.experiment.methods:
        run = copy.deepcopy(cfg)
        run.model.position.name, run.univit.enabled = name, False
        runs.append((name, run))
    for name in cfg.experiment.univit_methods:
        run = copy.deepcopy(cfg)
        run.model.position.name, run.univit.enabled = name, True
        run.model.position.cape2d.max_global_scaling = cfg.experiment.univit_max_global_scaling
        runs.append((f"univit/{name}", run))
    return runs


def result_rows(name: str, metrics: dict[str, Any], train_resolution: int) -> list[dict[str, Any]]:
    """CSV rows of one run: one per test resolution, plus the TTA row."""
    rows = [{"run": name, "eval": "single", "resolution": r, "accuracy": a} for r, a in metrics["accuracy"].items()]
    tta = "tta:" + "/".join(map(str, metrics["tta_resolutions"]))
    return rows + [{"run": name, "eval": tta, "resolution": train_resolution, "accuracy": metrics["tta"]}]


def run_experiment(cfg: VisionConfig, out_dir: str | Path, task: Any = None,
                   echo: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Train and evaluate every run (run directories ``out_dir/runs/<name>``, resumable); write
    results.csv, accuracy.png and config.yaml under ``out_dir``; return the CSV rows."""
    from posenc.tasks.vision.task import VisionTask

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_yaml(cfg, out / "config.yaml")
    task = task or VisionTask()
    echo = echo or (lambda text: print(text, flush=True))
    results = []
    for name, run in run_configs(cfg):
        done = run_task(task, run, out / "runs" / name)
        results.append({"run": name, "metrics": done.metrics, "summary": done.result.summary()})
        acc = done.metrics["accuracy"]
        echo(f"{name}: {done.result.state.step} steps; " + " ".join(f"{r}:{a:.4f}" for r, a in acc.items())
             + f" tta:{done.metrics['tta']:.4f}")
    return write_report(cfg, results, out)


def write_report(cfg: VisionConfig, results: list[dict[str, Any]], out_dir: Path) -> list[dict[str, Any]]:
    rows = [row for r in results for row in result_rows(r["run"], r["metrics"], cfg.model.image_size)]
    write_csv(rows, out_dir / "results.csv")
    plot_accuracy(rows, out_dir / "accuracy.png", train_resolution=cfg.model.image_size)
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
        ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", linestyle="--" if "univit" in name else "-", label=name)
    ax.axvline(train_resolution, color="grey", linewidth=0.8)
    ax.set_xlabel("test resolution (px)")
    ax.set_ylabel("top-1 accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
