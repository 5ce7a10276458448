"""The experiment side of the length-generalization task: methods × tasks × seeds, each cell a run
of :class:`~posenc.tasks.lengthgen.task.LengthgenTask` through :func:`posenc.tasks.base.run_task`
(one way to train; the run directory is owned, locked and fingerprinted like every run), run by
the shared grid runner (:mod:`posenc.experiments.runner`: ``--jobs``, ``--rerun-stale``, the
submitit backend), then the report. It is the shared methods grid
(:class:`~posenc.tasks.grid.MethodsGrid`) with one more dimension: the algorithmic task, whose
``task_overrides`` apply on top of the method's.

Layout under ``exp.root``: ``<task>/<method>/seed<N>/`` (a run directory: checkpoints, logs,
``eval.json`` and ``results.json`` once done; a done run is not retrained), ``report/``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from posenc.experiments.experiment import Experiment
from posenc.tasks.base import TaskRun
from posenc.tasks.grid import MethodsGrid
from posenc.tasks.lengthgen.config import LengthgenConfig, LengthgenExperimentConfig, experiment_of, task_groups
from posenc.tasks.lengthgen.report import write_report
from posenc.tasks.lengthgen.task import LengthgenTask


class LengthgenExperiment(MethodsGrid):
    """:class:`posenc.experiments.tasks.ExperimentTask` of the length-generalization suite: cells
    ``(task, method, seed)``; freshness, training and results as every methods grid."""

    experiment_config = LengthgenExperimentConfig
    run_config = LengthgenConfig

    def new_task(self) -> LengthgenTask:
        return LengthgenTask()

    def groups(self, options: LengthgenExperimentConfig) -> dict[str, dict[str, Any]]:
        """The algorithmic tasks, each with its overrides (:func:`~posenc.tasks.lengthgen.config.task_groups`)."""
        return task_groups(options)

    def results(self, done: dict[str, Any], run: TaskRun) -> dict[str, Any]:
        """Adds the best validation loss, the warm-up, the best step, whether the validation curve
        ended flat (so the report's status is the trainer's: training/convergence.status_of) and
        the step whose weights were evaluated (the best validation's,
        :func:`~posenc.tasks.lengthgen.task.restore_best`)."""
        metrics = dict(run.metrics)
        conv = run.result.summary()
        done["summary"].update(best_valid=run.result.state.best_valid,
                               evaluated_step=metrics.pop("evaluated_step", run.result.state.step),
                               warmup=conv.get("warmup"), best_step=conv.get("best_step"), flat=conv.get("flat"))
        return {**done, "metrics": metrics}

    def summary_line(self, exp: Experiment, result: dict[str, Any]) -> str:
        s, m = result.get("summary", {}), result.get("metrics", {})
        unseen = m.get("unseen_seq_acc")
        acc = f"{unseen:.3f}" if isinstance(unseen, (int, float)) else "–"
        return (f"done {result['method']:<16} {result['task']:<12} seed {result['seed']:<3} unseen seq acc {acc:>6}  "
                f"steps {s.get('steps', '–'):>6}  {s.get('status', '–')}")

    def report(self, exp: Experiment, results: list[dict[str, Any]]) -> Path:
        return write_report(exp.options, results, exp.root / "report")


TASK = LengthgenExperiment()


def collect(root: Path) -> list[dict[str, Any]]:
    """Every ``<task>/<method>/seed<N>/results.json`` under ``root`` (finished runs of a grid), each
    with its validation curve where its run directory keeps a valid.csv
    (:func:`~posenc.tasks.lengthgen.report.with_curves`: what the report's status tests)."""
    from posenc.tasks.lengthgen.report import with_curves

    return with_curves([json.loads(p.read_text(encoding="utf-8"))
                        for p in sorted(Path(root).glob("*/*/seed*/results.json"))], root)


def main(argv: list[str]) -> int:
    """``python -m posenc.tasks.lengthgen EXPERIMENT RESULTS_ROOT OUT_DIR``: the report of
    the finished runs under RESULTS_ROOT (a run directory tree or docs/results/<name>), partial grids
    included (missing cells are "–"); results of another config than the grid's for their cell
    (stale) are listed, not tabulated. OUT_DIR must be new, empty or a report directory posenc
    wrote (never-destroy); a bad argument or target is one line on stderr and exit status 2."""
    from posenc.errors import PosencError

    if len(argv) != 3:
        print("usage: python -m posenc.tasks.lengthgen EXPERIMENT RESULTS_ROOT OUT_DIR", file=sys.stderr)
        return 2
    try:
        return _report(argv[0], Path(argv[1]), Path(argv[2]))
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _report(name: str, root: Path, out_dir: Path) -> int:
    from posenc.config import load_config
    from posenc.experiments.runner import find_experiment
    from posenc.runs.ownership import check_target, write_marker
    from posenc.tasks.lengthgen.config import LengthgenExperimentConfig

    exp = load_config(LengthgenExperimentConfig, find_experiment(name))
    check_target(out_dir, "report", "OUT_DIR")  # before reading anything: nothing of a user's is overwritten
    grid = experiment_of(exp)
    current: list[dict[str, Any]] = []
    stale: list[tuple[dict[str, Any], str]] = []
    for r in collect(root):
        if r["task"] not in exp.tasks or r["method"] not in exp.methods or r["seed"] not in exp.seeds:
            continue
        verdict = TASK.verdict(grid, (r["task"], r["method"], r["seed"]), r)  # results given: never None
        if verdict.kind == "fresh":
            current.append(r)
        else:
            stale.append((r, verdict.detail))
    write_report(exp, current, out_dir, stale, root)
    write_marker(out_dir, "report")
    print(out_dir / "README.md")
    return 0

