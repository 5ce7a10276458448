"""The experiment driver: methods × tasks × seeds, each trained through the one Trainer
(:func:`posenc.training.trainer.train`), evaluated by test length, then the report.

Layout under ``exp.root``: ``<task>/<method>/seed<N>/`` (a run directory: checkpoints, logs,
``eval.json`` and ``results.json`` once done; a done run is not retrained), ``report/``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from posenc.config import from_dict, merge_overrides, save_yaml, to_dict
from posenc.tasks.lengthgen.config import LengthgenConfig, LengthgenExperimentConfig, expand
from posenc.tasks.lengthgen.generators import VOCAB_SIZE
from posenc.tasks.lengthgen.task import LengthgenTask
from posenc.training.trainer import train

log = logging.getLogger("posenc")


def run_one(task: LengthgenTask, cfg: LengthgenConfig, method: str) -> dict[str, Any]:
    """Train (resumable) and evaluate one run unless its ``results.json`` exists; returns its content."""
    out = Path(cfg.out_dir)
    done = out / "results.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    out.mkdir(parents=True, exist_ok=True)
    save_yaml(cfg, out / "config.yaml")
    torch.manual_seed(cfg.train.seed)  # initial weights follow train.seed
    model = task.build_model(cfg)
    sections = {"model": to_dict(replace(cfg.model, vocab_size=VOCAB_SIZE)), "data": to_dict(cfg.data)}
    batches = lambda epoch, rank, world: task.train_batches(cfg, epoch, rank, world)  # noqa: E731
    result = train(model, batches, cfg.train, out, valid_batches=task.valid_batches(cfg), loss_fn=task.loss,
                   d_model=cfg.model.d_model, config=sections)
    model.eval()
    metrics = task.evaluate(cfg, model, out)
    summary = {"steps": result.state.step, "wall_s": round(result.state.wall_s, 2), "best_valid": result.state.best_valid}
    res = {"task": cfg.data.task, "method": method, "seed": cfg.train.seed, "summary": summary, "metrics": metrics}
    done.write_text(json.dumps(res, indent=2), encoding="utf-8")
    return res


def run_grid(exp: LengthgenExperimentConfig) -> Path:
    """Every cell of the grid, then the report; returns the report directory."""
    task = LengthgenTask()
    results = []
    for name, method, seed, cfg in expand(exp):
        log.info("== %s / %s / seed %d -> %s", name, method, seed, cfg.out_dir)
        results.append(run_one(task, cfg, method))
    return task.report(exp, results, exp.root / "report")


def run_experiment(data: dict[str, Any], overrides: list[str]) -> Path:
    """``posenc experiment`` entry: a raw ``task: lengthgen`` mapping plus dotted overrides."""
    exp = from_dict(LengthgenExperimentConfig, merge_overrides(data, overrides, LengthgenExperimentConfig))
    return run_grid(exp)
