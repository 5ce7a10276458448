"""The vision experiment: every method of ``experiment.methods`` (and the UniViT variants of
``experiment.univit_methods``) trained through the one Trainer, then the report
(:mod:`posenc.tasks.vision.report`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

from posenc.config import from_dict, merge_overrides, save_yaml
from posenc.tasks.base import run_task, single_process_only
from posenc.tasks.vision.config import VisionConfig
from posenc.tasks.vision.report import write_report
from posenc.tasks.vision.task import VisionTask


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


def run_experiment(cfg: VisionConfig, out_dir: str | Path, task: Any = None,
                   echo: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Train and evaluate every run (run directories ``out_dir/runs/<name>``, resumable); write
    results.csv, accuracy.png and config.yaml under ``out_dir``; return the CSV rows."""
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


def experiment(data: dict[str, Any], overrides: list[str], **options: Any) -> Path:
    """``posenc experiment`` entry for ``task: vision`` (ViT on Fashion-MNIST by resolution, CAPE §5.1)."""
    single_process_only("vision", options)
    cfg = from_dict(VisionConfig, merge_overrides(data, overrides, VisionConfig))
    run_experiment(cfg, cfg.out_dir)
    return Path(cfg.out_dir)
