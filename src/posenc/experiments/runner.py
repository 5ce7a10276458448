"""Run an experiment grid cell by cell (resumable, ``--jobs`` worker processes), then its report.

An experiment is a grid of cells (:class:`~posenc.experiments.experiment.Cell`: group, method,
seed); the runner knows no task. The task named by the YAML's ``task:`` key (:mod:`posenc.experiments.tasks`)
supplies its experiment schema, the grid as data (an :class:`~posenc.experiments.experiment.Experiment`:
the cells and their run configs), whether a finished cell is still
fresh, how to bring a cell up to date and the report. It is looked up once per experiment (once
per worker process) and travels with the config as a :class:`Grid`. Every cell is a run
directory (the cell config's ``out_dir``) that holds ``results.json`` once done (written here,
atomically), so an interrupted grid resumes cell by cell; ``<root>/report/`` holds the report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from posenc.config import from_dict, load_yaml, merge_overrides
from posenc.errors import ConfigError
from posenc.experiments.experiment import Cell
from posenc.experiments.grid import Grid
from posenc.experiments.subset import CellSubset
from posenc.experiments.tasks import ExperimentTask, find_task, known_tasks
from posenc.files import atomic_write_text
from posenc.processes import interrupt_on_signals

__all__ = ["Cell", "Grid", "find_experiment", "grid_stages", "known_tasks", "load_grid", "run_experiment", "run_grid",
           "task_runner"]

log = logging.getLogger("posenc")


def check_report_dir(exp: Any) -> None:
    """``<root>/report`` must be new, empty or posenc's report (one-line RunDirError otherwise)."""
    from posenc.runs.ownership import check_target

    check_target(exp.root / "report", "report", "report directory")


def run_grid(exp: Any, jobs: int | str = 1, rerun_stale: bool = False, backend: str = "local",
             report_only: bool = False, task: ExperimentTask | None = None, subset: CellSubset | None = None) -> Path:
    """Every cell of ``exp`` brought up to date (``jobs`` > 1, ``"auto"`` or another backend: worker
    processes, :mod:`posenc.experiments.scheduler`), then the report; returns its directory.
    An experiment with a ``selection`` block first runs its validation sweep the same way
    (:mod:`posenc.experiments.selection`) and the grid then uses the chosen value.
    ``report_only``: train nothing; the report reads the fresh cells (a grid that spans sessions).
    ``task``: the experiment's task when the caller has it (else looked up here, once).
    ``subset``: bring only those cells up to date and write no report (:func:`train_subset`)."""
    from posenc.experiments.scheduler import AUTO, parse_jobs
    from posenc.runs.ownership import write_marker

    jobs = parse_jobs(jobs)
    if jobs == AUTO and backend != "local":
        raise ConfigError("--jobs auto needs --backend local (give submitit a number of runs at once)")
    if report_only and rerun_stale:
        raise ConfigError("--report-only trains nothing and clears nothing: drop --rerun-stale (or --report-only)")
    grid = Grid.of(exp, task)
    if subset is not None and not subset.everything:
        if report_only:
            raise ConfigError("--report-only reports every fresh cell: drop --settings/--methods/--seeds")
        train_subset(grid, subset, partial(bring_up_to_date, jobs=jobs, rerun_stale=rerun_stale, backend=backend))
        return grid.exp.root / "report"
    check_report_dir(exp)  # before any training: never a user's files
    if not report_only:
        check_data_up_front(grid)
    if report_only:
        grid, results, left = _report_only_results(grid)
    else:
        up_to_date = partial(bring_up_to_date, jobs=jobs, rerun_stale=rerun_stale, backend=backend)
        grid = _with_selection(grid, up_to_date)  # a selection stage first, if the YAML has one
        results, left = up_to_date(grid), []
    (grid.exp.root / "report").mkdir(parents=True, exist_ok=True)
    write_marker(grid.exp.root / "report", "report")  # before writing: a report that fails halfway is still posenc's
    report = grid.task.report(grid.exp, results)
    if left:
        _note_left_out(report / "README.md", left, len(left) + len(results))
    write_marker(report, "report")
    return report


def check_data_up_front(grid: Grid, subset: CellSubset | None = None) -> None:
    """The data of every cell still to run (of ``subset`` when given), the selection sweep's and the
    test grid's, checked once per setting by the task before anything trains or any worker starts:
    a missing data set is one line here, not a failure in every worker. The test grid's settings do
    not depend on the sweep's choice, so its cells are checked as configured."""
    sweep, main, _ = grid_stages(grid)
    for stage in (sweep, main):
        if stage is not None:
            todo = stage.todo([c for c in stage.cells() if subset is None or subset.wants(c)])
            stage.task.check_data(stage.exp, todo)


def _with_selection(grid: Grid, up_to_date: Callable[[Grid], list[dict[str, Any]]]) -> Grid:
    """The grid with its selection stage's choice (:func:`~posenc.experiments.selection.run_selection`,
    whose sweep ``up_to_date`` brings up to date); ``grid`` itself (its cells' judgements kept)
    when it selects nothing."""
    from posenc.experiments.selection import run_selection

    chosen = run_selection(grid.exp, grid.task, lambda sweep: up_to_date(grid.with_experiment(sweep)))
    return grid if chosen is grid.exp else grid.with_experiment(chosen)


def _report_only_results(grid: Grid) -> tuple[Grid, list[dict[str, Any]], list[str]]:
    """``--report-only``: the grid (with its complete selection sweep's choice), the results of its
    fresh cells and the names of the others (printed); one-line error when none is fresh. While
    the sweep is incomplete, the selected method's cells wait for its choice: the grid is reported
    without them, and they are named with the runs left out."""
    sweep, _, waits = grid_stages(grid)
    if waits and sweep is not None:
        grid, waiting = _without_selected(grid, sweep)
    else:
        grid, waiting = _with_selection(grid, _complete_sweep), []
    results, left = grid.fresh_results()
    left = left + waiting
    if not results:
        raise ConfigError(f"--report-only: none of the {len(left)} runs of {grid.exp.name} is done and fresh; "
                          "nothing to report")
    if left:
        print(f"report only: {len(left)} of {len(left) + len(results)} runs left out (not trained or not fresh): "
              + ", ".join(left), flush=True)
    return grid, results, left


def _without_selected(grid: Grid, sweep: Grid) -> tuple[Grid, list[str]]:
    """The grid without its selected method (no selection stage) and the names of that method's
    cells, which wait for the incomplete ``sweep``'s choice."""
    selected = grid.exp.selection.method
    done, todo = sweep.fresh_results()
    waiting = [cell.name + " (waits for the selection sweep)" for cell in grid.cells() if cell.method == selected]
    print(f"report only: the selection sweep is not complete ({len(done)} of {len(done) + len(todo)} runs done); "
          f"the {selected} runs wait for its choice and are left out", flush=True)
    kept = grid.exp.with_methods([m for m in grid.exp.methods if m != selected])  # its selection goes too
    return grid.with_experiment(kept), waiting


def _note_left_out(readme: Path, left: list[str], total: int) -> None:
    """Append the runs a ``--report-only`` report leaves out to its README (every task's report)."""
    if readme.is_file():
        text = readme.read_text(encoding="utf-8").rstrip("\n")
        atomic_write_text(readme, text + "\n\n## Runs left out of this report (`--report-only`)\n\n"
                          f"{len(left)} of {total} runs are not trained or not fresh: "
                          + ", ".join(left) + ".\n")


def bring_up_to_date(grid: Grid, jobs: int | str = 1, rerun_stale: bool = False,
                     backend: str = "local", subset: CellSubset | None = None) -> list[dict[str, Any]]:
    """Train/score every cell of ``grid`` (of ``subset`` when given) that is not fresh (``jobs``
    at once) and return the results of those cells, in grid order."""
    from posenc.experiments.scheduler import check_logs_dir, run_cells

    wanted = [cell for cell in grid.cells() if subset is None or subset.wants(cell)]
    serial = jobs == 1 and backend == "local"
    if not serial:
        check_logs_dir(grid.exp)
    pending = grid.plan(rerun_stale, wanted)
    grid.task.check_data(grid.exp, pending)  # also here: callers that bring a stage up to date directly
    grid.task.prepare(grid.exp, pending)
    if serial:
        for cell in pending:
            print(grid.task.summary_line(grid.exp, grid.execute(cell)), flush=True)
    else:
        run_cells(grid, pending, jobs, backend)
        for cell in pending:
            grid.judge(cell, again=True)  # the results its worker stored
    return [grid.execute(cell) for cell in wanted]  # all fresh now: their results, judged once


def train_subset(grid: Grid, subset: CellSubset, up_to_date: Callable[..., list[dict[str, Any]]]) -> None:
    """Bring the cells of ``subset`` up to date (``up_to_date``: :func:`bring_up_to_date` with the
    jobs and backend) and write no report: the grid's report is of the whole grid (``--report-only``
    once it is complete). The selection sweep's cells in ``subset`` train first; a cell of the
    selected method waits for the sweep's choice, so asking for one before the sweep is complete
    is a one-line error."""
    sweep, main, waits = grid_stages(grid)
    subset.check(grid, sweep, "posenc experiment")
    check_data_up_front(grid, subset)
    if sweep is not None and any(subset.wants(cell) for cell in sweep.cells()):
        up_to_date(sweep, subset=subset)
        sweep, main, waits = grid_stages(grid)
    selected = grid.exp.selection.method if sweep is not None else None
    if waits and any(subset.wants(cell) and cell[1] == selected for cell in main.cells()):
        raise ConfigError(f"posenc experiment: the {selected} cells wait for the selection sweep's choice; "
                          "train the sweep first (its cells, or the whole grid)")
    results = up_to_date(main, subset=subset)
    print(f"{len(results)} runs of {grid.exp.name} up to date (settings/methods/seeds asked for); report not "
          f"written: run `posenc experiment {grid.exp.name} --report-only` once the grid is complete", flush=True)


def load_grid(name_or_path: str, overrides: list[str] | None = None) -> Grid:
    """The grid of a shipped or user experiment with dotted ``overrides``, validated by its task's
    schema."""
    data = load_yaml(find_experiment(name_or_path))
    return grid_of(find_task(data.get("task", "translation")), data, list(overrides or []))


def grid_of(task: ExperimentTask, data: dict[str, Any], overrides: list[str]) -> Grid:
    """The grid of the raw experiment mapping ``data`` with dotted ``overrides``, validated by the
    task's experiment schema."""
    schema = task.experiment_config
    return Grid.of(from_dict(schema, merge_overrides(data, overrides, schema)), task)


def grid_stages(grid: Grid) -> tuple[Grid | None, Grid, bool]:
    """``(sweep, test grid, waits)``: the selection sweep of ``grid`` as a grid (None when it selects
    nothing) and the test grid, with the sweep's choice once every sweep cell is fresh; until then
    the test grid as configured and ``waits`` True (the cells of the selected method wait for the
    choice; the others do not depend on it). Writes nothing (the choice is recorded in
    ``selection.json`` when the grid runs or its report is written), so a queue may call it to
    validate and list cells."""
    from posenc.experiments.selection import resolved, with_choice

    sel = grid.exp.selection
    if sel is None or not sel.enabled:
        return None, grid, False
    sweep = grid.with_experiment(grid.exp.sweep(resolved(grid.exp)))
    results, left = sweep.fresh_results()
    if left:
        return sweep, grid, True
    return sweep, grid.with_experiment(with_choice(grid.exp, grid.task, results)[0]), False


def _complete_sweep(grid: Grid) -> list[dict[str, Any]]:
    """A selection sweep's results under ``--report-only``: its choice needs every cell."""
    results, left = grid.fresh_results()
    if left:
        raise ConfigError(f"--report-only: the selection sweep is not complete ({len(left)} runs left: "
                          f"{', '.join(left[:3])}{' ...' if len(left) > 3 else ''}); run it without --report-only")
    return results


def run_grid_experiment(task: ExperimentTask, data: dict[str, Any], overrides: list[str], **options: Any) -> Path:
    """``posenc experiment`` of a grid task: the raw mapping plus dotted overrides, validated by
    the task's experiment schema (:func:`grid_of`), then :func:`run_grid`."""
    return run_grid(grid_of(task, data, overrides).options, **options, task=task)


def task_runner(task: str) -> Callable[..., Path]:
    """The ``posenc experiment`` entry of ``task`` (:mod:`posenc.experiments.tasks`): the shared
    grid runner of its ``TASK``, the same for every task."""
    return partial(run_grid_experiment, find_task(task))


def shipped_configs() -> Path:
    """The directory of the shipped configs (package data: ``posenc/configs/<kind>/*.yaml``)."""
    from importlib.resources import files

    return Path(str(files("posenc").joinpath("configs")))


def find_experiment(name_or_path: str) -> Path:
    """A YAML path; a ``configs/...`` path as in the README (resolved against the shipped configs
    when it is not a file here); or the name of a shipped config (``configs/experiments/NAME.yaml``
    or ``configs/NAME.yaml``, e.g. ``vision/fashion_mnist_small``)."""
    path = Path(name_or_path)
    shipped = shipped_configs()
    if path.is_file():
        return path
    if path.parts[:1] == ("configs",) and (shipped.joinpath(*path.parts[1:])).is_file():
        return shipped.joinpath(*path.parts[1:])
    if path.suffix in (".yaml", ".yml"):
        return path  # a user file that does not exist: load_yaml names it
    for candidate in (shipped / "experiments" / f"{name_or_path}.yaml", shipped / f"{name_or_path}.yaml"):
        if candidate.is_file():
            return candidate
    known = sorted(p.stem for p in (shipped / "experiments").glob("*.yaml"))
    raise ConfigError(f"unknown experiment {name_or_path!r} (shipped: {', '.join(known)}; or give a YAML path)")




def run_experiment(name_or_path: str, overrides: list[str] | None = None, **options: Any) -> Path:
    """Run a shipped or user experiment, the one named whatever the machine (a GPU variant is
    asked for by its own name, e.g. ``quickstart_gpu``); its top-level ``task`` picks the runner
    (:func:`task_runner`). ``options`` (``jobs``, ``rerun_stale``, ``backend``) go to it; tasks
    without grids reject them."""
    data = load_yaml(find_experiment(name_or_path))
    task = data.get("task", "translation")
    with interrupt_on_signals():  # SIGTERM stops the grid like Ctrl-C: cleanup runs, exit 143 (SIGINT 130)
        return task_runner(task)(data, list(overrides or []), **options)
