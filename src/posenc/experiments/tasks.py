"""Which task runs an experiment: the ``task:`` key of its YAML, looked up by module, never by a
list of names here (a new task is one package; nothing in posenc changes).

``task: NAME`` is the package ``posenc.tasks.NAME``; a dotted ``task: pkg.module`` (e.g.
``tests.dummy_task``) is that module. The module's ``TASK`` is its experiment side, an
:class:`ExperimentTask`: the experiment schema, the grid's cells and each cell's run config,
whether a finished cell is still fresh, how to bring a cell up to date, its summary line and the
report. Every task is entered the same way: its ``TASK`` through the shared grid runner.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, Protocol

from posenc.errors import ConfigError
from posenc.runs.same_run import Verdict


class Cell(NamedTuple):
    """One run of an experiment grid, as the runner passes it around (log names, worker argv,
    results paths). ``group`` is the task's outer coordinate: translation's data setting, the
    task name in a methods × seeds grid (:mod:`posenc.tasks.grid`); the runner never reads it."""

    group: str
    method: str
    seed: int


_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class ExperimentTask(Protocol):
    """The experiment side of a task: what :mod:`posenc.experiments.runner` asks of it."""

    #: The experiment schema (a dataclass with ``task``, ``root``, methods and seeds).
    experiment_config: type

    def cells(self, exp: Any) -> list[Cell]:
        """Every cell of the grid, in report order."""
        ...

    def cell_config(self, exp: Any, cell: Cell) -> Any:
        """The validated run config of ``cell``; its ``out_dir`` is the cell's run directory."""
        ...

    def verdict(self, exp: Any, cell: Cell, results: dict[str, Any] | None) -> Verdict | None:
        """How the cell's stored ``results`` (None: none yet) relate to the current config;
        None when the cell has to run (no results, nothing stale)."""
        ...

    def run_cell(self, exp: Any, cell: Cell, verdict: Verdict | None, old: dict[str, Any] | None) -> dict[str, Any]:
        """Train (resuming) and/or evaluate the cell; its results (the runner stores them)."""
        ...

    def summary_line(self, exp: Any, result: dict[str, Any]) -> str:
        """One line printed as a run finishes."""
        ...

    def report(self, exp: Any, results: list[dict[str, Any]]) -> Path:
        """Write the report of the grid from ``results`` (every cell's; with ``--report-only`` only
        the fresh cells', possibly none of a setting or method); return its directory."""
        ...


def task_module(ref: str) -> ModuleType:
    """The module of ``task: ref`` (``posenc.tasks.<ref>`` for a bare name), else a one-line error."""
    name = f"posenc.tasks.{ref}" if ref.isidentifier() else ref
    if not _MODULE.match(ref) or (ref.isidentifier() and ref not in known_tasks()):
        raise ConfigError(f"experiment task must be one of {', '.join(known_tasks())} or a module path, got {ref!r}")
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and name.startswith(err.name):
            raise ConfigError(f"experiment task must be one of {', '.join(known_tasks())} or a module path, "
                              f"got {ref!r}") from None
        raise


def find_task(ref: str) -> ExperimentTask:
    """The ``TASK`` of ``task: ref``; a one-line error for a module that defines none."""
    task = getattr(task_module(ref), "TASK", None)
    if task is None:
        raise ConfigError(f"experiment task {ref!r}: its module defines no TASK (its experiment side)")
    return task


def task_of(exp: Any) -> ExperimentTask:
    """The experiment side of the task of the experiment config ``exp``."""
    return find_task(exp.task)


def known_tasks() -> list[str]:
    """``translation`` and every other ``posenc.tasks`` package, found by name like the task
    itself (:func:`task_module`): the runner sits below the tasks and imports none of them."""
    return list(_task_packages())


@functools.cache
def _task_packages() -> tuple[str, ...]:
    """The scan behind :func:`known_tasks`, once per process (the installed packages do not change)."""
    spec = importlib.util.find_spec("posenc.tasks")
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    found = sorted(m.name for m in pkgutil.iter_modules(where) if m.ispkg and m.name != "translation")
    return ("translation", *found)
