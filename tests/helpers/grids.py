"""An experiment config's grid in a test (:class:`~posenc.experiments.experiment.Experiment`, built
by its task), and what a cell of it holds now: its verdict and its results file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc.experiments.cell import results_path
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.judgements import judge
from posenc.experiments.task_grid import TaskGrid
from posenc.experiments.tasks import task_of
from posenc.runs.same_run import Verdict


def grid_of_config(options: Any, task: TaskGrid | None = None) -> Experiment:
    """The grid of the experiment config ``options``, built by ``task`` (None: the one its ``task:`` names)."""
    return (task_of(options) if task is None else task).experiment(options)


def verdict_now(grid: Experiment, cell: tuple[str, str, int], task: TaskGrid | None = None) -> Verdict | None:
    """The cell's verdict on its stored results read now (None: it has to run)."""
    return judge(task_of(grid) if task is None else task, grid, Cell(*cell)).verdict


def results_file(grid: Experiment, cell: tuple[str, str, int]) -> Path:
    """Where the cell's ``results.json`` is (or will be)."""
    return results_path(grid.run_config(cell))
