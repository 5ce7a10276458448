"""Which task runs an experiment or a run: the ``task:`` key of its YAML, looked up by module,
never by a list of names here (a new task is one package; nothing in posenc changes).

``task: NAME`` is the module ``posenc.tasks.NAME.task``; a dotted ``task: pkg.module`` (e.g.
``tests.dummy_task``) is that module, or the ``task`` module of that package where the package
defines no ``TASK`` (a package of four files: config, spec, task and report, no ``__init__.py``).
The module's ``TASK`` is its experiment side, an
:class:`ExperimentTask`: the experiment and run schemas, the grid as data (an
:class:`~posenc.experiments.experiment.Experiment`: its cells and each cell's run config), whether
a finished cell is still fresh, how to bring a cell up to date, its summary line, the report and
the optional stages (data checks and preparation, merged cells, a selection sweep).
Every task is entered the same way: its ``TASK`` through the shared grid runner, and one run of it
through ``posenc train`` (:meth:`ExperimentTask.new_task` and :attr:`ExperimentTask.run_config`).
"""

from __future__ import annotations

import abc
import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from posenc.errors import ConfigError
from posenc.experiments.experiment import Cell, Experiment
from posenc.runs.same_run import Verdict
from posenc.runs.spec import task_packages

#: The module of a task package that holds its ``TASK``.
TASK_MODULE = "task"
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class ExperimentTask(abc.ABC):
    """The experiment side of a task: everything :mod:`posenc.experiments.runner` (and its
    scheduler, queue and merge) asks of it, declared here. A task's ``TASK`` subclasses it, defines
    the abstract methods and overrides the hooks it needs (the others keep their defaults)."""

    #: The experiment schema (a dataclass with ``task``, ``root``, methods and seeds).
    experiment_config: ClassVar[type]
    #: The schema of one run (a cell's config; what ``posenc train`` reads).
    run_config: ClassVar[type]

    # ------------------------------------------------------------------ what every task defines
    @abc.abstractmethod
    def new_task(self) -> Any:
        """A fresh :class:`~posenc.tasks.base.Task` that trains one run of :attr:`run_config`
        (``posenc train``; one per cell).

        Returns:
            The task object.
        """

    @abc.abstractmethod
    def experiment(self, options: Any) -> Experiment:
        """The grid of an experiment config: its base, axes, seeds and selection as data.

        Args:
            options: the experiment config (an :attr:`experiment_config`).

        Returns:
            The :class:`~posenc.experiments.experiment.Experiment` (its ``options``: ``options``),
            whose cells and run configs the runner uses.
        """

    @abc.abstractmethod
    def verdict(self, exp: Experiment, cell: Cell, results: dict[str, Any] | None) -> Verdict | None:
        """How the cell's stored results relate to the current config.

        Args:
            exp: the experiment.
            cell: the cell.
            results: its stored ``results.json`` (None: none yet).

        Returns:
            The verdict, or None when the cell has to run (no results, nothing stale).
        """

    @abc.abstractmethod
    def run_cell(self, exp: Experiment, cell: Cell, verdict: Verdict | None,
                 old: dict[str, Any] | None) -> dict[str, Any]:
        """Train (resuming) and/or evaluate the cell.

        Args:
            exp: the experiment.
            cell: the cell.
            verdict: its :meth:`verdict`; without results, the verdict on the run started in its
                directory, which resumes with it (None: nothing recorded, it runs afresh).
            old: its stored results (None: none).

        Returns:
            Its results, JSON-safe (the runner stores them).
        """

    @abc.abstractmethod
    def summary_line(self, exp: Experiment, result: dict[str, Any]) -> str:
        """One line printed as a run finishes.

        Args:
            exp: the experiment.
            result: the cell's results.

        Returns:
            The line.
        """

    @abc.abstractmethod
    def report(self, exp: Experiment, results: list[dict[str, Any]]) -> Path:
        """Write the report of the grid.

        Args:
            exp: the experiment.
            results: every cell's results (with ``--report-only`` only the fresh cells', possibly
                none of a setting or method).

        Returns:
            The report's directory.
        """

    # ------------------------------------------------------------------ hooks, with defaults
    def check_data(self, exp: Experiment, cells: list[Cell]) -> None:
        """Check that the data of ``cells`` are at hand, before any run or worker starts.

        Args:
            exp: the experiment.
            cells: the cells about to run.

        Raises:
            DataError: one line naming what is missing (default: nothing to check).
        """
        return None

    def prepare(self, exp: Experiment, cells: list[Cell]) -> None:
        """Prepare what ``cells`` share before any of them runs (e.g. data prepared once per
        setting; default: nothing).

        Args:
            exp: the experiment.
            cells: the cells about to run.
        """
        return None

    def check_carried(self, exp: Experiment, cell: Cell, results: dict[str, Any],
                      run_dir: Path) -> tuple[str, str | None]:
        """Judge the scores of a cell trained elsewhere and brought back (``posenc experiment --merge``).

        Args:
            exp: the experiment.
            cell: the cell.
            results: the results it carries.
            run_dir: its carried run directory.

        Returns:
            ``(what became of its scores, why they do not hold here or None)``; by default they
            are taken as carried (a task whose runs carry no outputs to recompute them from).
        """
        return "scores as carried: its task carries no outputs to recompute them from", None

    def selection_score(self, result: dict[str, Any], metric: str) -> float:
        """A selection sweep cell's validation ``metric`` (:mod:`posenc.experiments.selection`; the
        sweep itself is the grid's, :meth:`~posenc.experiments.experiment.Experiment.sweep`, scored
        on what its ``sweep_options`` say).

        Args:
            result: the sweep cell's results.
            metric: the selection's metric name.

        Returns:
            Its value. By default a task has no selection stage (a one-line ConfigError).
        """
        raise ConfigError("this experiment task has no selection stage")


def task_module(ref: str) -> ModuleType:
    """The module that holds the ``TASK`` of ``task: ref``, else a one-line error.

    Args:
        ref: a bare name (``posenc.tasks.<ref>.task``) or a module path (that module, or the
            ``task`` module of that package when the package itself defines no ``TASK``).

    Returns:
        The module (the package itself when it has no ``task`` module: :func:`find_task` then
        says in one line that it defines no ``TASK``).
    """
    name = f"posenc.tasks.{ref}.{TASK_MODULE}" if ref.isidentifier() else ref
    if not _MODULE.match(ref) or (ref.isidentifier() and ref not in known_tasks()):
        raise ConfigError(f"task must be one of {', '.join(known_tasks())} or a module path, got {ref!r}")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and name.startswith(err.name):
            raise ConfigError(f"task must be one of {', '.join(known_tasks())} or a module path, "
                              f"got {ref!r}") from None
        raise
    if hasattr(module, "TASK") or not hasattr(module, "__path__"):
        return module
    try:  # a package without a TASK: its task module
        return importlib.import_module(f"{name}.{TASK_MODULE}")
    except ModuleNotFoundError as err:
        if err.name == f"{name}.{TASK_MODULE}":
            return module  # neither defines a TASK: find_task says so in one line
        raise


def find_task(ref: str) -> ExperimentTask:
    """The ``TASK`` of ``task: ref``; a one-line error for a module that defines none."""
    task = getattr(task_module(ref), "TASK", None)
    if task is None:
        raise ConfigError(f"experiment task {ref!r}: its module defines no TASK (its experiment side)")
    return task


def task_of(exp: Any) -> ExperimentTask:
    """The experiment side of the task of ``exp`` (an experiment config or an :class:`Experiment`)."""
    return find_task(exp.task)


def known_tasks() -> list[str]:
    """``translation`` and every other package of ``posenc.tasks`` with a task module, found by its
    files (:func:`~posenc.runs.spec.task_packages`; no ``__init__.py`` needed) like the task itself
    (:func:`task_module`): the runner sits below the tasks and imports none of them.

    Returns:
        The bare task names.
    """
    found = [p.name for p in task_packages() if (p / f"{TASK_MODULE}.py").is_file() and p.name != "translation"]
    return ["translation", *found]
