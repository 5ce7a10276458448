"""Each cell of an experiment grid judged once (:func:`judge`) and brought up to date with that
judgement (:func:`bring_up`); the judgements the runner takes kept for the grids it brings up to
date (:class:`Judgements`), so the plan, the data check, bringing a cell up to date and reading its
results back all use one judgement per cell.

The grid is an :class:`~posenc.experiments.experiment.Experiment` value and its task a
:class:`~posenc.experiments.task_grid.TaskGrid`; both are passed to every step explicitly, the
judgements beside them, owned by the runner (or a worker process) that takes them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from posenc.errors import ConfigError
from posenc.experiments.cell import JudgedCell, results_path, started_verdict
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.task_grid import TaskGrid
from posenc.runs.run import Run
from posenc.runs.same_run import Verdict

log = logging.getLogger("posenc")


def judge(task: TaskGrid, exp: Experiment, cell: tuple[str, str, int]) -> JudgedCell:
    """``cell`` of ``exp`` judged now: its run config, its stored results and the task's verdict
    on them; without results, the run started in its directory (:func:`started_verdict`), stale
    or kept to resume it.

    Args:
        task: the experiment's task.
        exp: the experiment.
        cell: the cell.

    Returns:
        The judged cell.
    """
    cell = Cell(*cell)
    cfg = exp.run_config(cell)
    path = results_path(cfg)
    if not path.is_file():
        started = started_verdict(cfg)
        if started is not None and started.kind == "stale":
            return JudgedCell(cell, cfg, None, started)
        return JudgedCell(cell, cfg, None, None, started)
    results = json.loads(path.read_text(encoding="utf-8"))
    return JudgedCell(cell, cfg, results, task.verdict(exp, cell, results))


def bring_up(task: TaskGrid, exp: Experiment, judged: JudgedCell) -> dict[str, Any]:
    """Bring the cell up to date with its judgement: fresh → its stored results; stale → a one-line
    ConfigError (stale cells are cleared, ``--rerun-stale``, or refused before); otherwise the task
    runs the cell with the verdict on its run (on its results, or on the run started there) and
    the cell's run stores the results.

    Args:
        task: the experiment's task.
        exp: the experiment.
        judged: the cell, judged once (:func:`judge`).

    Returns:
        Its results, as stored.
    """
    if judged.fresh:
        return judged.results or {}
    if judged.stale:
        raise ConfigError(f"{judged.cfg.out_dir}: stale results ({judged.verdict.detail}); rerun with --rerun-stale")
    result = task.run_cell(exp, judged.cell, judged.verdict or judged.started, judged.results)
    return Run(Path(judged.cfg.out_dir), judged.cfg, judged.verdict).write_results(result)


def grid_key(exp: Experiment) -> str:
    """What makes two experiment values the same grid: every field that decides its cells and
    their run configs (the task's completion functions are the same for every grid of a task).

    Args:
        exp: the experiment.

    Returns:
        A key, equal for two values built from the same config.
    """
    return repr((exp.name, exp.task, exp.root, exp.run_schema, exp.base, exp.methods, exp.seeds, exp.groups,
                 exp.group_last, exp.selection, exp.options, exp.sweep_options))


class Judgements:
    """The judgements a runner takes, one per cell of each experiment it brings up to date (a
    cell is a :class:`Cell` or a plain ``(group, method, seed)``), kept by the experiment's value
    (:func:`grid_key`): a grid built again the same way (the selection sweep, listed for the data
    check and then run) shares its judgements; a grid of other cells or configs is judged afresh.

    A cell is judged when first asked for (:meth:`judge`); a cell brought up to date in this process
    (:meth:`execute`), or by a worker process (:meth:`stored_by_worker`), is fresh with its new
    results."""

    def __init__(self) -> None:
        self._kept: dict[str, dict[Cell, JudgedCell]] = {}  # grid_key(exp) -> its cells' judgements

    def _of(self, exp: Experiment) -> dict[Cell, JudgedCell]:
        return self._kept.setdefault(grid_key(exp), {})

    def judge(self, task: TaskGrid, exp: Experiment, cell: tuple[str, str, int]) -> JudgedCell:
        """The cell judged once (:func:`judge`)."""
        kept, cell = self._of(exp), Cell(*cell)
        if cell not in kept:
            kept[cell] = judge(task, exp, cell)
        return kept[cell]

    def execute(self, task: TaskGrid, exp: Experiment, cell: tuple[str, str, int]) -> dict[str, Any]:
        """Bring one cell up to date with its judgement and return its results (:func:`bring_up`):
        fresh → the stored results; otherwise the task runs the cell and its run stores the
        results. Stale cells must have been cleared (``--rerun-stale``) or refused by :meth:`plan`
        before."""
        judged = self.judge(task, exp, cell)
        result = bring_up(task, exp, judged)
        if not judged.fresh:  # what it stored now is the run of today's config
            self._of(exp)[judged.cell] = JudgedCell(judged.cell, judged.cfg, result, Verdict("fresh"))
        return result

    def stored_by_worker(self, exp: Experiment, cell: tuple[str, str, int]) -> None:
        """Take the results a worker process stored for ``cell`` as the run of today's config
        (the worker judged the cell and brought it up to date, as :meth:`execute` does here): read,
        not judged again. A cell whose worker stored nothing is left to be judged anew.

        Args:
            exp: the experiment.
            cell: the cell its worker brought up to date.
        """
        cell = Cell(*cell)
        cfg = exp.run_config(cell)
        path = results_path(cfg)
        kept = self._of(exp)
        if path.is_file():
            kept[cell] = JudgedCell(cell, cfg, json.loads(path.read_text(encoding="utf-8")), Verdict("fresh"))
        else:
            kept.pop(cell, None)

    def todo(self, task: TaskGrid, exp: Experiment, cells: list[Cell] | None = None) -> list[Cell]:
        """The cells (of ``cells``, default every one) that are not fresh: those a run would train
        or score (stale ones included); reads results only, changes nothing."""
        return [c for c in (exp.cells() if cells is None else cells) if not self.judge(task, exp, c).fresh]

    def plan(self, task: TaskGrid, exp: Experiment, rerun_stale: bool = False,
             cells: list[Cell] | None = None) -> list[Cell]:
        """The cells (of ``cells``, default every one) that need work. Stale cells stop the
        experiment with one line naming the differing keys, or with ``rerun_stale`` have their run
        directory cleared so they train from scratch (judged so: nothing stored)."""
        judged = [self.judge(task, exp, cell) for cell in (exp.cells() if cells is None else cells)]
        stale = [j for j in judged if j.stale]
        if stale and not rerun_stale:
            first = stale[0]
            more = f" (and {len(stale) - 1} more runs)" if len(stale) > 1 else ""
            raise ConfigError(f"stale results in {first.cfg.out_dir}{more}: the config changed: "
                              f"{first.verdict.detail}; rerun with --rerun-stale, or use another out_dir")
        for j in stale:
            _clear_stale(j.cfg)
            self._of(exp)[j.cell] = JudgedCell(j.cell, j.cfg, None, None)
            log.info("== %s: stale, its outputs removed for a fresh run", j.cell.label)
        return [j.cell for j in judged if not j.fresh]

    def fresh_results(self, task: TaskGrid, exp: Experiment) -> tuple[list[dict[str, Any]], list[str]]:
        """The stored results of the fresh cells, in grid order (trains nothing), and the name
        (with the verdict when there is one) of every other cell."""
        judged = [self.judge(task, exp, cell) for cell in exp.cells()]
        return [j.results or {} for j in judged if j.fresh], [j.name for j in judged if not j.fresh]


def _clear_stale(cfg: Any) -> None:
    """Remove what posenc wrote in a stale cell's run directory (``cfg.out_dir``; never the
    directory itself, never files it did not write, the task's own by its spec): refused in one
    line unless the directory is posenc's run."""
    from posenc.runs.ownership import check_target
    from posenc.runs.run import clear_run
    from posenc.runs.spec import spec_of

    check_target(cfg.out_dir, "run")
    clear_run(cfg.out_dir, spec_of(cfg))
