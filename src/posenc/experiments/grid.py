"""One experiment grid and its task, looked up once (:class:`Grid`): the cell-level steps of the
runner (:mod:`posenc.experiments.runner`), its scheduler and its worker processes: each cell of the
:class:`~posenc.experiments.experiment.Experiment` judged once on its stored ``results.json``
(:mod:`posenc.experiments.cell`), brought up to date with that judgement, and the plan of what
needs work."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from posenc.errors import ConfigError
from posenc.experiments.cell import JudgedCell, bring_up, judge, results_path
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.tasks import ExperimentTask, task_of
from posenc.runs.same_run import Verdict

log = logging.getLogger("posenc")


def trained_on(results: dict[str, Any]) -> str:
    """Where a cell's run trained, from its stored results: the device its training summary names
    (with the GPU's name), else the ``train.device`` of its record when that names one (``auto``
    says nothing of where it ran), else ``unknown``."""
    named = (results.get("summary") or {}).get("device")
    if named:
        return str(named)
    configured = ((results.get("record") or {}).get("extension") or {}).get("device")
    return str(configured) if configured and configured != "auto" else "unknown"


@dataclass(frozen=True, eq=False)
class Grid:
    """An experiment (:class:`~posenc.experiments.experiment.Experiment`), its task looked up once
    (:meth:`of`) and each cell's judgement, passed along every cell-level step of the runner (the
    task's own stages are asked of ``grid.task`` with ``grid.exp``). A cell is a :class:`Cell` or a
    plain ``(group, method, seed)``.

    Each cell is judged once per grid (:meth:`judge`, :mod:`posenc.experiments.cell`): the plan, the
    data check, bringing it up to date and reading its results back all use that judgement; a
    cell brought up to date in this process is judged by its new results, and :meth:`verdict`
    (or ``judge(cell, again=True)``) looks at the stored results again (cells run by workers)."""

    exp: Experiment
    task: ExperimentTask
    judged: dict[Cell, JudgedCell] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def of(cls, options: Any, task: ExperimentTask | None = None) -> Grid:
        """The grid of the experiment config ``options`` with its task: ``task``, else the one its
        ``task:`` key names (the one lookup of an experiment's task).

        Args:
            options: the task's typed experiment config.
            task: its task, when already looked up (None: looked up by ``options.task``).

        Returns:
            The grid.
        """
        task = task_of(options) if task is None else task
        return cls(task.experiment(options), task)

    @property
    def options(self) -> Any:
        """The experiment config the grid came from (what the task's stages read)."""
        return self.exp.options

    def with_experiment(self, exp: Experiment) -> Grid:
        """Another grid of the same task (a selection sweep, the grid with the chosen value), its
        cells judged afresh.

        Args:
            exp: the grid, e.g. derived from :attr:`exp` (:meth:`Experiment.sweep`,
                :meth:`Experiment.with_value`).

        Returns:
            The grid with ``exp`` and this grid's task.
        """
        return replace(self, exp=exp)

    def cells(self) -> list[Cell]:
        """Every cell of the grid, in report order."""
        return self.exp.cells()

    def config(self, cell: tuple[str, str, int]) -> Any:
        """The run config of one cell (its ``out_dir`` is the cell's run directory)."""
        return self.exp.run_config(cell)

    def results_path(self, cell: tuple[str, str, int]) -> Path:
        """Where the cell's ``results.json`` is (or will be)."""
        return results_path(self.config(cell))

    def judge(self, cell: tuple[str, str, int], again: bool = False) -> JudgedCell:
        """The cell judged once (:func:`~posenc.experiments.cell.judge`); ``again``: look at its
        stored results anew (written by another process since)."""
        cell = Cell(*cell)
        if again or cell not in self.judged:
            self.judged[cell] = judge(self.task, self.exp, cell)
        return self.judged[cell]

    def verdict(self, cell: tuple[str, str, int]) -> Verdict | None:
        """None when the cell has to run, else how its stored results (read now) relate to the
        current config."""
        return self.judge(cell, again=True).verdict

    def execute(self, cell: tuple[str, str, int]) -> dict[str, Any]:
        """Bring one cell up to date with its judgement and return its results: fresh → the stored
        results; otherwise the task runs the cell and its run stores the results
        (:func:`~posenc.experiments.cell.bring_up`). Stale cells must have been cleared
        (``--rerun-stale``) or refused by :meth:`plan` before."""
        judged = self.judge(cell)
        result = bring_up(self.task, self.exp, judged)
        if not judged.fresh:  # what it stored now is the run of today's config
            self.judged[judged.cell] = JudgedCell(judged.cell, judged.cfg, result, Verdict("fresh"))
        return result

    def todo(self, cells: list[Cell] | None = None) -> list[Cell]:
        """The cells (of ``cells``, default every one) that are not fresh: those a run would train
        or score (stale ones included); reads results only, changes nothing."""
        return [c for c in (self.cells() if cells is None else cells) if not self.judge(c).fresh]

    def plan(self, rerun_stale: bool = False, cells: list[Cell] | None = None) -> list[Cell]:
        """The cells (of ``cells``, default every one) that need work. Stale cells stop the
        experiment with one line naming the differing keys, or with ``rerun_stale`` have their run
        directory cleared so they train from scratch (judged so: nothing stored)."""
        judged = [self.judge(cell) for cell in (self.cells() if cells is None else cells)]
        stale = [j for j in judged if j.stale]
        if stale and not rerun_stale:
            first = stale[0]
            more = f" (and {len(stale) - 1} more runs)" if len(stale) > 1 else ""
            raise ConfigError(f"stale results in {first.cfg.out_dir}{more}: the config changed: "
                              f"{first.verdict.detail}; rerun with --rerun-stale, or use another out_dir")
        for j in stale:
            _clear_stale(j.cfg)
            self.judged[j.cell] = JudgedCell(j.cell, j.cfg, None, None)
            log.info("== %s: stale, its outputs removed for a fresh run", j.cell.label)
        return [j.cell for j in judged if not j.fresh]

    def fresh_results(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The stored results of the fresh cells, in grid order (trains nothing), and the name
        (with the verdict when there is one) of every other cell."""
        judged = [self.judge(cell) for cell in self.cells()]
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
