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
from dataclasses import replace
from pathlib import Path
from typing import Any

from posenc.config import from_dict, load_yaml, to_dict
from posenc.errors import ConfigError
from posenc.experiments.freshness import Verdict
from posenc.pipeline.fingerprint import describe_diff
from posenc.pipeline.rundir import atomic_write_text
from posenc.tasks.base import run_task
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


def config_record(cfg: LengthgenConfig) -> dict[str, Any]:
    """The run config as ``results.json`` records it: everything but where the run lies, so a
    results file judges its own freshness wherever it is copied or committed."""
    record = to_dict(cfg)
    record.pop("out_dir", None)
    return record


def config_change(results: dict[str, Any], cfg: LengthgenConfig) -> str | None:
    """None when ``results`` were trained with ``cfg`` (its recorded config, read with today's
    defaults for keys added since, equals ``cfg`` but for ``out_dir``), else what differs."""
    if not isinstance(results.get("config"), dict):
        return "results.json records no config (written before results carried one)"
    try:
        saved = from_dict(LengthgenConfig, {**results["config"], "out_dir": cfg.out_dir})
    except ConfigError as err:
        return f"its recorded config no longer loads ({err})"
    if saved == cfg:
        return None
    return describe_diff(config_record(saved), config_record(cfg))


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
        """stale when the results' recorded config (or, without results, the run's saved
        config.yaml) is another config than the cell's, wherever the run directory now lies;
        fresh when the results were trained with it; None when the cell has to run."""
        cfg = run_config(exp, *cell)
        if results is not None:
            change = config_change(results, cfg)
            return Verdict("fresh") if change is None else Verdict("stale", change)
        saved = Path(cfg.out_dir) / "config.yaml"
        if saved.is_file() and replace(from_dict(LengthgenConfig, load_yaml(saved)), out_dir=cfg.out_dir) != cfg:
            return Verdict("stale", f"the run in {cfg.out_dir} was started with another config")
        return None

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
