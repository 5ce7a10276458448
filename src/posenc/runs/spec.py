"""What a task declares about its runs, so that ``runs/`` and ``training/`` obey it and name no task.

Each task declares one :class:`RunSpec` in the module ``spec`` of its package (the config class's
``run_spec``), registered (:func:`declare`) when that module is imported. A run's own spec comes
with its config (:func:`spec_of`); what holds for directories of any task (a cache posenc keeps?
the prepared data ``posenc upgrade`` marks?) is asked of every spec (:func:`declared`), found by
discovery as position methods are (:func:`discover`), whatever this process imported before.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunSpec:
    """A task's declaration about its runs.

    Args:
        task: the task's name (the ``task:`` key of experiment YAMLs).
        derived_keys: dotted config keys the task fills in from its data (the number of token
            types, a scale measured on the data): 0 or absent in a new config means "take it from the data",
            so against a stored run it is no difference.
        run_files: files (and directories) the task writes into a run directory, removed with the
            run's other outputs when it starts afresh (``--no-resume``).
        run_dirs: directories of ``run_files`` → the pattern of the names the task writes in them
            (only those are removed; a user's file there stays).
        data_files: the files of the task's prepared data directory: an unmarked directory that
            holds them all is prepared data an older posenc wrote, marked by ``posenc upgrade``.
        caches: names of cache directories the task keeps beside its prepared data (posenc's, marked
            or not: they may lie in a directory posenc is about to write).
        scoring_sections: top-level config sections that only say how the task's runs are scored
            (never in the fingerprint: scoring a run otherwise is no other run).
        data_runtime_keys: ``data.*`` options that only say how the prepared data is used when
            training and using a model (length caps), not what is prepared: left out of the
            prepared data's fingerprint (:func:`~posenc.runs.fingerprint.data_fingerprint`), so
            prepared data is shared across them.
        carries: what the task's runs hold for the analyses to read (names of analysis/view.py);
            an analysis runs on the task's grids when they carry everything it needs. Empty: no
            analysis reads them.
    """

    task: str
    derived_keys: frozenset[str] = frozenset()
    run_files: tuple[str, ...] = ()
    run_dirs: dict[str, str] = field(default_factory=dict)
    data_files: tuple[str, ...] = ()
    caches: tuple[str, ...] = ()
    scoring_sections: tuple[str, ...] = ()
    data_runtime_keys: frozenset[str] = frozenset()
    carries: frozenset[str] = frozenset()

    def own_children(self) -> dict[str, re.Pattern[str]]:
        """:attr:`run_dirs` with their patterns compiled.

        Returns:
            Each directory of ``run_files`` → the compiled pattern of the names the task writes in it.
        """
        return {name: re.compile(pattern) for name, pattern in self.run_dirs.items()}


#: The spec of a config that declares none: nothing task-specific.
NO_TASK = RunSpec("")

_DECLARED: dict[str, RunSpec] = {}

#: The package of the tasks: each of its packages declares its spec in its module :data:`SPEC_MODULE`.
TASKS_PACKAGE = "posenc.tasks"
SPEC_MODULE = "spec"


def declare(spec: RunSpec) -> RunSpec:
    """Register a task's spec, so questions about directories of any task (:func:`declared`) ask it.

    Args:
        spec: the task's spec; declaring one of the same ``task`` again replaces it.

    Returns:
        ``spec`` itself (``SPEC = declare(RunSpec(...))``).
    """
    _DECLARED[spec.task] = spec
    return spec


def declared() -> tuple[RunSpec, ...]:
    """Every task's spec (:func:`discover`) and any other declared in this process.

    Returns:
        The specs in task-name order, the same whatever order their modules were imported in.
    """
    discover()
    return tuple(_DECLARED[task] for task in sorted(_DECLARED))


@functools.cache
def task_packages() -> tuple[Path, ...]:
    """The folders of the packages of :data:`TASKS_PACKAGE`, found by their files (a folder of
    modules, with or without ``__init__.py``: a task is its config, spec, task and report), in
    name order.

    Returns:
        Each task package's folder (its name is the package's).
    """
    found = importlib.util.find_spec(TASKS_PACKAGE)
    wheres = [Path(w) for w in (found.submodule_search_locations or [])] if found is not None else []
    folders = [p for w in wheres for p in w.iterdir() if p.is_dir() and p.name.isidentifier()]
    return tuple(sorted((p for p in folders if not p.name.startswith("_") and any(p.glob("*.py"))),
                        key=lambda p: p.name))


@functools.cache
def discover() -> None:
    """Import the :data:`SPEC_MODULE` of every package of :data:`TASKS_PACKAGE` (found by their
    files: :func:`task_packages` lists the folders holding one), so each task's spec is
    declared whatever modules were imported before: a new task's spec is found by its file. Once
    per process (the installed packages do not change)."""
    for package in task_packages():
        if (package / f"{SPEC_MODULE}.py").is_file():
            importlib.import_module(f"{TASKS_PACKAGE}.{package.name}.{SPEC_MODULE}")


def spec_of(cfg: Any) -> RunSpec:
    """The spec of a run config's task.

    Args:
        cfg: a run config (a dataclass instance).

    Returns:
        Its class's ``run_spec``, else :data:`NO_TASK`.
    """
    return getattr(type(cfg), "run_spec", NO_TASK)
