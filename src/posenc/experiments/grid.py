"""One experiment grid and its task, looked up once (:class:`Grid`): the cell-level steps of the
runner (:mod:`posenc.experiments.runner`), its scheduler and its worker processes: the cells and
their run configs, each cell's verdict on its stored ``results.json``, bringing a cell up to date
(results written atomically), the plan of what needs work and the report."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from posenc.errors import ConfigError
from posenc.experiments.tasks import Cell, ExperimentTask, task_of
from posenc.files import atomic_write_text
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


def _load_results(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


@dataclass(frozen=True, eq=False)
class Grid:
    """An experiment config and its task, looked up once (:meth:`of`) and passed along: every
    cell-level step of the runner. A cell is a :class:`Cell` or a plain ``(group, method, seed)``."""

    exp: Any
    task: ExperimentTask

    @classmethod
    def of(cls, exp: Any) -> Grid:
        """``exp`` with the task its ``task:`` key names (the one lookup of an experiment's task)."""
        return cls(exp, task_of(exp))

    def on(self, exp: Any) -> Grid:
        """Another experiment of the same task (a selection sweep, the grid with the chosen value)."""
        return replace(self, exp=exp)

    def cells(self) -> list[Cell]:
        """Every cell of the grid, in report order."""
        return self.task.cells(self.exp)

    def config(self, cell: tuple[str, str, int]) -> Any:
        """The run config of one cell (its ``out_dir`` is the cell's run directory)."""
        return self.task.cell_config(self.exp, Cell(*cell))

    def results_path(self, cell: tuple[str, str, int]) -> Path:
        """Where the cell's ``results.json`` is (or will be)."""
        return Path(self.config(cell).out_dir) / "results.json"

    def verdict(self, cell: tuple[str, str, int]) -> Verdict | None:
        """None when the cell has to run, else how its stored results relate to the current config."""
        return self.task.verdict(self.exp, Cell(*cell), _load_results(self.results_path(cell)))

    def execute(self, cell: tuple[str, str, int]) -> dict[str, Any]:
        """Bring one cell up to date with the current config and return its results: fresh → the
        stored results; otherwise the task runs the cell and its results are stored. Stale cells
        must have been cleared (``--rerun-stale``) or refused by :meth:`plan` before."""
        cell = Cell(*cell)
        done = self.results_path(cell)
        old = _load_results(done)
        v = self.task.verdict(self.exp, cell, old)
        if v is not None and v.kind == "fresh":
            return old or {}
        if v is not None and v.kind == "stale":
            raise ConfigError(f"{done.parent}: stale results ({v.detail}); rerun with --rerun-stale")
        result = self.task.run_cell(self.exp, cell, v, old)
        atomic_write_text(done, json.dumps(result, indent=2))
        return result

    def summary_line(self, result: dict[str, Any]) -> str:
        """The task's line for a finished run."""
        return self.task.summary_line(self.exp, result)

    def check_data(self, cells: list[Cell]) -> None:
        """The task's check that the data of ``cells`` are at hand (a one-line DataError naming what
        is missing), before any run or worker starts (by default a task checks nothing)."""
        if cells:
            self.task.check_data(self.exp, cells)

    def todo(self, cells: list[Cell] | None = None) -> list[Cell]:
        """The cells (of ``cells``, default every one) that are not fresh: those a run would train
        or score (stale ones included); reads results only, changes nothing."""
        return [c for c in (self.cells() if cells is None else cells)
                if (v := self.verdict(c)) is None or v.kind != "fresh"]

    def prepare(self, cells: list[Cell]) -> None:
        """The task's preparation of ``cells`` before any runs (e.g. data prepared once per setting)."""
        self.task.prepare(self.exp, cells)

    def report(self, results: list[dict[str, Any]]) -> Path:
        """The task's report of ``results``; returns its directory."""
        return self.task.report(self.exp, results)

    def plan(self, rerun_stale: bool = False, cells: list[Cell] | None = None) -> list[Cell]:
        """The cells (of ``cells``, default every one) that need work. Stale cells stop the
        experiment with one line naming the differing keys, or with ``rerun_stale`` have their run
        directory cleared so they train from scratch."""
        pending, stale = [], []
        for cell in self.cells() if cells is None else cells:
            v = self.verdict(cell)
            if v is not None and v.kind == "stale":
                stale.append((cell, v))
            if v is None or v.kind != "fresh":
                pending.append(cell)
        if stale and not rerun_stale:
            cell, v = stale[0]
            more = f" (and {len(stale) - 1} more runs)" if len(stale) > 1 else ""
            raise ConfigError(f"stale results in {self.config(cell).out_dir}{more}: the config changed: "
                              f"{v.detail}; rerun with --rerun-stale, or use another out_dir")
        for cell, _ in stale:
            _clear_stale(self.config(cell))
            log.info("== %s / %s / seed %d: stale, its outputs removed for a fresh run", *cell)
        return pending

    def fresh_results(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The stored results of the fresh cells, in grid order (trains nothing), and
        ``setting/method/seed`` (with the verdict when there is one) of every other cell."""
        results, left = [], []
        for cell in self.cells():
            v = self.verdict(cell)
            if v is not None and v.kind == "fresh":
                results.append(_load_results(self.results_path(cell)) or {})
            else:
                left.append("/".join(map(str, cell)) + ("" if v is None else f" ({v.kind})"))
        return results, left


def _clear_stale(cfg: Any) -> None:
    """Remove what posenc wrote in a stale cell's run directory (``cfg.out_dir``; never the
    directory itself, never files it did not write, the task's own by its spec): refused in one
    line unless the directory is posenc's run."""
    from posenc.runs.ownership import check_target
    from posenc.runs.run import clear_run
    from posenc.runs.spec import spec_of

    check_target(cfg.out_dir, "run")
    clear_run(cfg.out_dir, spec_of(cfg))
