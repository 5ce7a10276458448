"""The experiment side of the length-generalization task: methods × tasks × seeds, each cell a run
of :class:`~posenc.tasks.lengthgen.task.LengthgenTask` through :func:`posenc.tasks.base.run_task`
(one way to train; the run directory is owned, locked and fingerprinted like every run), run by
the shared grid runner (:mod:`posenc.experiments.runner`: ``--jobs``, ``--rerun-stale``, the
submitit backend), then the report.

Layout under ``exp.root``: ``<task>/<method>/seed<N>/`` (a run directory: checkpoints, logs,
``eval.json`` and ``results.json`` once done; a done run is not retrained), ``report/``. The
grid's settings are the algorithmic tasks (``exp.tasks``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from posenc.experiments.freshness import Verdict
from posenc.pipeline.rundir import atomic_write_text
from posenc.tasks.base import run_task
from posenc.tasks.grid import config_record, recorded_verdict
from posenc.tasks.lengthgen.config import LengthgenConfig, LengthgenExperimentConfig, run_config
from posenc.tasks.lengthgen.task import LengthgenTask

log = logging.getLogger("posenc")

Cell = tuple[str, str, int]  # (task, method, seed)


def cell_result(task: LengthgenTask, cfg: LengthgenConfig, method: str) -> dict[str, Any]:
    """Train (resumable) and evaluate one run; its results (what ``results.json`` stores).

    The summary records the trainer's stop reason and convergence status
    (:mod:`posenc.training.convergence`); the evaluated weights are those of the best validation."""
    run = run_task(task, cfg)
    conv = run.result.summary()
    metrics = dict(run.metrics)
    evaluated = metrics.pop("evaluated_step", run.result.state.step)
    summary = {"steps": run.result.state.step, "wall_s": round(run.result.state.wall_s, 2),
               "best_valid": run.result.state.best_valid, "evaluated_step": evaluated,
               **{k: conv[k] for k in ("stopped", "warmup", "best_step", "status", "converged")}}
    return {"task": cfg.data.task, "method": method, "seed": cfg.train.seed, "config": config_record(cfg),
            "summary": summary, "metrics": metrics}


def run_one(task: LengthgenTask, cfg: LengthgenConfig, method: str) -> dict[str, Any]:
    """:func:`cell_result` unless the run's ``results.json`` exists (then its content); stored."""
    done = Path(cfg.out_dir) / "results.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    res = cell_result(task, cfg, method)
    atomic_write_text(done, json.dumps(res, indent=2))
    return res


class LengthgenExperiment:
    """:class:`posenc.experiments.tasks.ExperimentTask` of the length-generalization suite."""

    experiment_config = LengthgenExperimentConfig

    def cells(self, exp: LengthgenExperimentConfig) -> list[Cell]:
        return [(task, method, seed) for task in exp.tasks for method in exp.methods for seed in exp.seeds]

    def cell_config(self, exp: LengthgenExperimentConfig, cell: Cell) -> LengthgenConfig:
        return run_config(exp, *cell)

    def verdict(self, exp: LengthgenExperimentConfig, cell: Cell, results: dict[str, Any] | None) -> Verdict | None:
        """:func:`~posenc.tasks.grid.recorded_verdict` of the cell's run config."""
        return recorded_verdict(run_config(exp, *cell), results)

    def run_cell(self, exp: LengthgenExperimentConfig, cell: Cell, verdict: Verdict | None,
                 old: dict[str, Any] | None) -> dict[str, Any]:
        log.info("== %s / %s / seed %d -> %s", *cell, run_config(exp, *cell).out_dir)
        return cell_result(LengthgenTask(), run_config(exp, *cell), cell[1])

    def summary_line(self, exp: LengthgenExperimentConfig, result: dict[str, Any]) -> str:
        s, m = result.get("summary", {}), result.get("metrics", {})
        unseen = m.get("unseen_seq_acc")
        acc = f"{unseen:.3f}" if isinstance(unseen, (int, float)) else "–"
        return (f"done {result['method']:<16} {result['task']:<12} seed {result['seed']:<3} unseen seq acc {acc:>6}  "
                f"steps {s.get('steps', '–'):>6}  {s.get('status', '–')}")

    def report(self, exp: LengthgenExperimentConfig, results: list[dict[str, Any]]) -> Path:
        return LengthgenTask().report(exp, results, exp.root / "report")


TASK = LengthgenExperiment()


def experiment(data: dict[str, Any], overrides: list[str], **options: Any) -> Path:
    """``posenc experiment`` entry for ``task: lengthgen``: the shared grid runner."""
    from posenc.experiments.runner import run_grid_experiment

    return run_grid_experiment(TASK, data, overrides, **options)
