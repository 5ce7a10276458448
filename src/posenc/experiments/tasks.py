"""Which task runs an experiment or a run: the ``task:`` key of its YAML, looked up by module,
never by a list of names here (a new task is one package; nothing in posenc changes).

``task: NAME`` is the module ``posenc.tasks.NAME.task``; a dotted ``task: pkg.module`` (e.g.
``tests.dummy_task``) is that module, or the ``task`` module of that package where the package
defines no ``TASK`` (a package of four files: config, spec, task and report, no ``__init__.py``).
The module's ``TASK`` is the task (a :class:`~posenc.tasks.base.Task`), whose grid side
(:class:`~posenc.experiments.task_grid.TaskGrid`) the runner asks for: the experiment and run
schemas, the grid as data (an :class:`~posenc.experiments.experiment.Experiment`: its cells and
each cell's run config), whether a finished cell is still fresh, how to bring a cell up to date,
its summary line, the report and the optional stages (data checks and preparation, merged cells, a
selection sweep). Every task is entered the same way: its ``TASK`` through the shared grid runner,
and one run of it through ``posenc train`` (:meth:`TaskGrid.new_task
<posenc.experiments.task_grid.TaskGrid.new_task>` and its ``run_config``).
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

from posenc.errors import ConfigError
from posenc.experiments.task_grid import TaskGrid
from posenc.runs.spec import task_packages

#: The module of a task package that holds its ``TASK``.
TASK_MODULE = "task"
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


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


def find_task(ref: str) -> TaskGrid:
    """The ``TASK`` of ``task: ref``; a one-line error for a module that defines none."""
    task = getattr(task_module(ref), "TASK", None)
    if task is None:
        raise ConfigError(f"experiment task {ref!r}: its module defines no TASK (the task)")
    return task


def task_of(exp: Any) -> TaskGrid:
    """The task of ``exp`` (an experiment config or an :class:`Experiment`)."""
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
