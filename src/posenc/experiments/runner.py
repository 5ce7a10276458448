"""Run an experiment grid cell by cell (resumable, ``--jobs`` worker processes), then its report.

An experiment is a grid of cells (:class:`~posenc.experiments.experiment.Cell`: group, method,
seed); the runner knows no task. The task named by the YAML's ``task:`` key (:mod:`posenc.experiments.tasks`)
supplies its experiment schema, the grid as data (an :class:`~posenc.experiments.experiment.Experiment`:
the cells and their run configs), whether a finished cell is still
fresh, how to bring a cell up to date and the report. It is looked up once per experiment (once
per worker process) and passed beside the grid to every step, with the judgement of each cell
taken once (:class:`~posenc.experiments.judgements.Judgements`, owned here). Every cell is a run
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
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.judgements import Judgements
from posenc.experiments.subset import CellSubset
from posenc.experiments.task_grid import TaskGrid
from posenc.experiments.tasks import find_task, known_tasks, task_of
from posenc.files import atomic_write_text
from posenc.processes import interrupt_on_signals

__all__ = ["Cell", "find_experiment", "grid_stages", "known_tasks", "load_grid", "run_experiment",
           "run_grid", "task_runner"]

log = logging.getLogger("posenc")


def check_report_dir(exp: Any) -> None:
    """``<root>/report`` must be new, empty or posenc's report (one-line RunDirError otherwise)."""
    from posenc.runs.ownership import check_target

    check_target(exp.root / "report", "report", "report directory")


def run_grid(exp: Experiment, jobs: int | str = 1, rerun_stale: bool = False, backend: str = "local",
             report_only: bool = False, task: TaskGrid | None = None, subset: CellSubset | None = None) -> Path:
    """Every cell of the grid ``exp`` brought up to date (``jobs`` > 1, ``"auto"`` or another
    backend: worker processes, :mod:`posenc.experiments.scheduler`), then the report; returns its
    directory. An experiment with a ``selection`` block first runs its validation sweep the same way
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
    task = task_of(exp) if task is None else task
    judged = Judgements()
    up_to_date = partial(bring_up_to_date, jobs=jobs, rerun_stale=rerun_stale, backend=backend)
    if subset is not None and not subset.everything:
        if report_only:
            raise ConfigError("--report-only reports every fresh cell: drop --settings/--methods/--seeds")
        train_subset(exp, task, judged, subset, up_to_date)
        return exp.root / "report"
    check_report_dir(exp)  # before any training: never a user's files
    if report_only:
        exp, results, left = _report_only_results(exp, task, judged)
    else:
        check_data_up_front(exp, task, judged)
        exp = _with_selection(exp, task, judged, up_to_date)  # a selection stage first, if the YAML has one
        results, left = up_to_date(exp, task, judged), []
    (exp.root / "report").mkdir(parents=True, exist_ok=True)
    write_marker(exp.root / "report", "report")  # before writing: a report that fails halfway is still posenc's
    report = task.report(exp, results)
    if left:
        _note_left_out(report / "README.md", left, len(left) + len(results))
    write_marker(report, "report")
    return report


#: Brings the cells of a grid up to date and returns their results: ``(exp, task, judged)``.
UpToDate = Callable[[Experiment, TaskGrid, Judgements], list[dict[str, Any]]]


def check_data_up_front(exp: Experiment, task: TaskGrid, judged: Judgements, subset: CellSubset | None = None) -> None:
    """The data of every cell still to run (of ``subset`` when given), the selection sweep's and the
    test grid's, checked once per setting by the task before anything trains or any worker starts:
    a missing data set is one line here, not a failure in every worker. The test grid's settings do
    not depend on the sweep's choice, so its cells are checked as configured."""
    sweep, main, _ = grid_stages(exp, task, judged)
    for stage in (sweep, main):
        if stage is not None:
            todo = judged.todo(task, stage, [c for c in stage.cells() if subset is None or subset.wants(c)])
            task.check_data(stage, todo)


def _with_selection(exp: Experiment, task: TaskGrid, judged: Judgements, up_to_date: UpToDate) -> Experiment:
    """The grid with its selection stage's choice (:func:`~posenc.experiments.selection.run_selection`,
    whose sweep ``up_to_date`` brings up to date); ``exp`` itself (its cells' judgements kept)
    when it selects nothing."""
    from posenc.experiments.selection import run_selection

    return run_selection(exp, task, lambda sweep: up_to_date(sweep, task, judged))


def _report_only_results(exp: Experiment, task: TaskGrid,
                         judged: Judgements) -> tuple[Experiment, list[dict[str, Any]], list[str]]:
    """``--report-only``: the grid (with its complete selection sweep's choice), the results of its
    fresh cells and the names of the others (printed); one-line error when none is fresh. While
    the sweep is incomplete, the selected method's cells wait for its choice: the grid is reported
    without them, and they are named with the runs left out."""
    sweep, _, waits = grid_stages(exp, task, judged)
    if waits and sweep is not None:
        exp, waiting = _without_selected(exp, task, judged, sweep)
    else:
        exp, waiting = _with_selection(exp, task, judged, _complete_sweep), []
    results, left = judged.fresh_results(task, exp)
    left = left + waiting
    if not results:
        raise ConfigError(f"--report-only: none of the {len(left)} runs of {exp.name} is done and fresh; "
                          "nothing to report")
    if left:
        print(f"report only: {len(left)} of {len(left) + len(results)} runs left out (not trained or not fresh): "
              + ", ".join(left), flush=True)
    return exp, results, left


def _without_selected(exp: Experiment, task: TaskGrid, judged: Judgements,
                      sweep: Experiment) -> tuple[Experiment, list[str]]:
    """The grid without its selected method (no selection stage) and the names of that method's
    cells, which wait for the incomplete ``sweep``'s choice."""
    selected = exp.selection.method
    done, todo = judged.fresh_results(task, sweep)
    waiting = [cell.name + " (waits for the selection sweep)" for cell in exp.cells() if cell.method == selected]
    print(f"report only: the selection sweep is not complete ({len(done)} of {len(done) + len(todo)} runs done); "
          f"the {selected} runs wait for its choice and are left out", flush=True)
    return exp.with_methods([m for m in exp.methods if m != selected]), waiting  # its selection goes too


def _note_left_out(readme: Path, left: list[str], total: int) -> None:
    """Append the runs a ``--report-only`` report leaves out to its README (every task's report)."""
    if readme.is_file():
        text = readme.read_text(encoding="utf-8").rstrip("\n")
        atomic_write_text(readme, text + "\n\n## Runs left out of this report (`--report-only`)\n\n"
                          f"{len(left)} of {total} runs are not trained or not fresh: "
                          + ", ".join(left) + ".\n")


def bring_up_to_date(exp: Experiment, task: TaskGrid, judged: Judgements, jobs: int | str = 1,
                     rerun_stale: bool = False, backend: str = "local",
                     subset: CellSubset | None = None) -> list[dict[str, Any]]:
    """Train/score every cell of ``exp`` (of ``subset`` when given) that is not fresh (``jobs`` at
    once), each judged once (``judged``), and return the results of those cells, in grid order."""
    from posenc.experiments.scheduler import check_logs_dir, run_cells

    wanted = [cell for cell in exp.cells() if subset is None or subset.wants(cell)]
    serial = jobs == 1 and backend == "local"
    if not serial:
        check_logs_dir(exp)
    pending = judged.plan(task, exp, rerun_stale, wanted)
    task.check_data(exp, pending)  # also here: callers that bring a stage up to date directly
    task.prepare(exp, pending)
    if serial:
        for cell in pending:
            print(task.summary_line(exp, judged.execute(task, exp, cell)), flush=True)
    else:
        run_cells(exp, task, pending, jobs, backend)
        for cell in pending:
            judged.stored_by_worker(exp, cell)  # the results its worker stored: today's run
    return [judged.execute(task, exp, cell) for cell in wanted]  # all fresh now: their results, judged once


def train_subset(exp: Experiment, task: TaskGrid, judged: Judgements, subset: CellSubset,
                 up_to_date: Callable[..., list[dict[str, Any]]]) -> None:
    """Bring the cells of ``subset`` up to date (``up_to_date``: :func:`bring_up_to_date` with the
    jobs and backend) and write no report: the grid's report is of the whole grid (``--report-only``
    once it is complete). The selection sweep's cells in ``subset`` train first; a cell of the
    selected method waits for the sweep's choice, so asking for one before the sweep is complete
    is a one-line error."""
    sweep, main, waits = grid_stages(exp, task, judged)
    subset.check(exp, sweep, "posenc experiment")
    check_data_up_front(exp, task, judged, subset)
    swept: list[dict[str, Any]] = []
    if sweep is not None and any(subset.wants(cell) for cell in sweep.cells()):
        swept = up_to_date(sweep, task, judged, subset=subset)
        sweep, main, waits = grid_stages(exp, task, judged)
    selected = exp.selection.method if sweep is not None else None
    if waits and any(subset.wants(cell) and cell[1] == selected for cell in main.cells()):
        raise ConfigError(f"posenc experiment: the {selected} cells wait for the selection sweep's choice; "
                          "train the sweep first (its cells, or the whole grid)")
    results = up_to_date(main, task, judged, subset=subset)
    of_sweep = f", {len(swept)} of them of the selection sweep" if swept else ""
    print(f"{len(swept) + len(results)} runs of {exp.name} up to date (settings/methods/seeds asked for{of_sweep}); "
          f"report not written: run `posenc experiment {exp.name} --report-only` once the grid is complete", flush=True)


def load_grid(name_or_path: str, overrides: list[str] | None = None) -> Experiment:
    """The grid of a shipped or user experiment with dotted ``overrides``, validated by its task's
    schema (its task: :func:`~posenc.experiments.tasks.task_of` of it)."""
    data = load_yaml(find_experiment(name_or_path))
    return grid_of(find_task(data.get("task", "translation")), data, list(overrides or []))


def grid_of(task: TaskGrid, data: dict[str, Any], overrides: list[str]) -> Experiment:
    """The grid of the raw experiment mapping ``data`` with dotted ``overrides``, validated by the
    task's experiment schema (:meth:`~posenc.experiments.task_grid.TaskGrid.experiment`)."""
    schema = task.experiment_config
    return task.experiment(from_dict(schema, merge_overrides(data, overrides, schema)))


def grid_stages(exp: Experiment, task: TaskGrid,
                judged: Judgements | None = None) -> tuple[Experiment | None, Experiment, bool]:
    """``(sweep, test grid, waits)``: the selection sweep of ``exp`` (None when it selects nothing)
    and the test grid, with the sweep's choice once every sweep cell is fresh; until then the test
    grid as configured and ``waits`` True (the cells of the selected method wait for the choice;
    the others do not depend on it). The sweep's cells are judged in ``judged`` (None: judgements
    of their own). Writes nothing (the choice is recorded in ``selection.json`` when the grid runs
    or its report is written), so a queue may call it to validate and list cells."""
    from posenc.experiments.selection import resolved, with_choice

    sel = exp.selection
    if sel is None or not sel.enabled:
        return None, exp, False
    sweep = exp.sweep(resolved(exp))
    results, left = (Judgements() if judged is None else judged).fresh_results(task, sweep)
    if left:
        return sweep, exp, True
    return sweep, with_choice(exp, task, results)[0], False


def _complete_sweep(sweep: Experiment, task: TaskGrid, judged: Judgements) -> list[dict[str, Any]]:
    """A selection sweep's results under ``--report-only``: its choice needs every cell."""
    results, left = judged.fresh_results(task, sweep)
    if left:
        raise ConfigError(f"--report-only: the selection sweep is not complete ({len(left)} runs left: "
                          f"{', '.join(left[:3])}{' ...' if len(left) > 3 else ''}); run it without --report-only")
    return results


def run_grid_experiment(task: TaskGrid, data: dict[str, Any], overrides: list[str], **options: Any) -> Path:
    """``posenc experiment`` of a grid task: the raw mapping plus dotted overrides, validated by
    the task's experiment schema (:func:`grid_of`), then :func:`run_grid`."""
    return run_grid(grid_of(task, data, overrides), **options, task=task)


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
