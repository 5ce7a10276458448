"""``posenc experiment NAME --merge ARCHIVE``: the cells a timed session brought back
(:mod:`posenc.window.archive`) placed into this grid's out_dir, then its report regenerated.

The archive comes from another machine: it is checked as a whole before anything is unpacked
(:mod:`posenc.window.intake`: bounded, only the files a cell carries, one line naming what is
wrong), and each cell's scores are recomputed here from the outputs it carries, where its task
says how (the task's ``check_carried``: translation rescores every carried hypothesis file against
the references prepared here and compares the vocabulary; lengthgen, speech and vision carry no
outputs, so their scores are taken as carried and each merged line says so). A cell whose scores
do not hold is refused. A merge that places no cell leaves the out_dir as it found it.

Each archived cell is judged by the grid's own verdict, the one "same run?" rule
(:func:`posenc.runs.same_run.same_run` for translation), against the cell's config here: only a
fresh one is placed; one trained or scored under another config is refused in one line naming the
differing keys (where it trained is a placement key and never differs). A cell whose run directory
here holds anything (a committed cell, a run trained here meanwhile) is kept as it is: nothing is
ever overwritten. The selection sweep's cells are placed first, so the test grid's cells of the
selected method are judged with the choice of the complete sweep. Merged cells' worker logs join
``<root>/logs`` where no log of that name is yet.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.errors import ConfigError, PosencError, RunDirError
from posenc.experiments.cell import trained_on
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.judgements import judge
from posenc.experiments.runner import grid_stages, run_grid
from posenc.experiments.task_grid import TaskGrid
from posenc.experiments.tasks import task_of
from posenc.runs.ownership import dir_kind
from posenc.runs.spec import spec_of
from posenc.window.intake import CheckedArchive, GridRules, open_archive, plain_name, shown

#: How many of an archive's grids a message names.
SHOWN_GRIDS = 5


@dataclass
class MergeResult:
    """What a merge did: one line per archived cell, the counts, and the report's directory (None:
    not regenerated, with ``report_note`` saying why)."""

    lines: list[str] = field(default_factory=list)
    merged: int = 0
    kept: int = 0
    refused: int = 0
    report: Path | None = None
    report_note: str = ""

    def summary(self) -> str:
        report = (f"report: {self.report / 'README.md'}" if self.report
                  else f"report not regenerated ({self.report_note})")
        return f"merge: {self.merged} merged, {self.kept} kept, {self.refused} refused; {report}"


def archived_grid(manifest: dict[str, Any], grid: Experiment, archive: Path) -> tuple[int, dict[str, Any]]:
    """The archive's part for ``grid``: the one of its name at this out_dir, else the only one of its
    name (trained at another out_dir); a one-line ConfigError when none or several fit."""
    name, root = str(grid.name), str(grid.root)
    mine = [(i, g) for i, g in enumerate(manifest["grids"]) if isinstance(g, dict) and g.get("name") == name]
    here = [(i, g) for i, g in mine if g.get("root") == root]
    if here:
        return here[0]
    if len(mine) == 1:
        return mine[0]
    grids = manifest["grids"]
    held = ", ".join(f"{shown(str(g.get('name')), 40)} at {shown(str(g.get('root')), 80)}" for g in grids[:SHOWN_GRIDS])
    held = (held + (f" and {len(grids) - SHOWN_GRIDS} more" if len(grids) > SHOWN_GRIDS else "")) or "none"
    if not mine:
        raise ConfigError(f"--merge {archive}: no cells of experiment {name} (it holds: {held})")
    raise ConfigError(f"--merge {archive}: several grids of experiment {name}, none at {root} ({held}); "
                      "give the out_dir= it was trained with")


def check_out_dir(grid: Experiment) -> None:
    """The grid's out_dir may take merged cells, checked before anything is written there: a
    directory (or new) that is no posenc directory itself and lies in none (a run, prepared data, a
    report, ...), with its report and log directories new, empty or posenc's (one-line RunDirError)."""
    from posenc.experiments.runner import check_report_dir
    from posenc.experiments.scheduler import check_logs_target
    from posenc.runs.ownership import KIND_WORDS, check_outside_posenc_dirs, dir_kind

    root = Path(grid.root)
    if root.exists() and not root.is_dir():
        raise RunDirError(f"out_dir {root} is a file, not a directory")
    kind = dir_kind(root)
    if kind is not None:
        raise RunDirError(f"out_dir {root} is a posenc {KIND_WORDS[kind]}, not an experiment's out_dir")
    check_outside_posenc_dirs(root, "out_dir")
    check_report_dir(grid)
    check_logs_target(grid)


def merge_archive(grid: Experiment, archive: str | Path, task: TaskGrid | None = None) -> MergeResult:
    """Place the archive's fresh cells of ``grid`` into its out_dir and regenerate its report; a
    merge that places none leaves the out_dir as it was (:func:`_undo_unused`). ``task``: the
    grid's task when the caller has it (else looked up here, once)."""
    archive = Path(archive)
    task = task_of(grid) if task is None else task
    check_out_dir(grid)
    chosen: list[tuple[int, list[tuple[Cell, str]]]] = []
    checked = open_archive(archive, lambda manifest: _grid_rules(grid, manifest, archive, chosen))
    (index, cells), = chosen
    result = MergeResult()
    root = Path(grid.root)
    new_dirs = [d for d in (root, *root.parents) if not d.exists()]
    before = set(root.iterdir()) if root.is_dir() else set()
    root.mkdir(parents=True, exist_ok=True)
    try:
        _unpack_and_place(grid, task, checked, index, cells, result)
    finally:
        if not result.merged:
            _undo_unused(root, before, new_dirs)
    if result.merged:
        _regenerate_report(grid, task, result)
    else:
        result.report_note = "no cell merged"
    return result


def _grid_rules(grid: Experiment, manifest: dict[str, Any], archive: Path,
                chosen: list[tuple[int, list[tuple[Cell, str]]]]) -> GridRules:
    """What the archive's part for ``grid`` may hold (its cells, and the files its task's runs
    carry), noted in ``chosen`` with the index of that part."""
    index, part = archived_grid(manifest, grid, archive)
    cells = _cells(part, archive)
    chosen.append((index, cells))
    return GridRules(index, frozenset(path for _, path in cells), spec_of(grid.run_config(grid.cells()[0])))


def _unpack_and_place(grid: Experiment, task: TaskGrid, checked: CheckedArchive, index: int,
                      cells: list[tuple[Cell, str]], result: MergeResult) -> None:
    """Unpack the grid's part of the archive beside its cells and place them; the unpacked copy is
    removed however it ends."""
    unpacked = Path(tempfile.mkdtemp(prefix=".merge-", dir=grid.root))
    try:
        checked.extract_grid(index, unpacked)
        _place_all(grid, task, cells, unpacked, result)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)


def _undo_unused(root: Path, before: set[Path], new_dirs: list[Path]) -> None:
    """After a merge that placed no cell: remove the posenc directories it made in ``root`` (data
    prepared to rescore a cell) and the directories it created up to ``root``, when empty."""
    if root.is_dir():
        for entry in set(root.iterdir()) - before:
            if entry.is_dir() and not entry.is_symlink() and dir_kind(entry) is not None:
                shutil.rmtree(entry, ignore_errors=True)
    for directory in new_dirs:
        try:
            directory.rmdir()
        except OSError:
            return


def _cells(part: dict[str, Any], archive: Path) -> list[tuple[Cell, str]]:
    """``(cell, path under cells/)`` of an archived grid: each cell once, under a plain relative path
    that no other cell's path contains (a one-line ConfigError otherwise)."""
    entries = part.get("cells") or []
    if not isinstance(entries, list):
        raise ConfigError(f"--merge {archive}: its manifest's cells are not a list")
    out = []
    for c in entries:
        try:
            cell, path = Cell(str(c["group"]), str(c["method"]), int(c["seed"])), c["path"]
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"--merge {archive}: a cell entry of its manifest is malformed "
                              f"({shown(repr(c))})") from None
        if not isinstance(path, str) or not plain_name(path):
            raise ConfigError(f"--merge {archive}: cell path {shown(str(path))} is not a plain relative path")
        out.append((cell, path))
    _check_distinct(out, archive)
    return out


def _check_distinct(cells: list[tuple[Cell, str]], archive: Path) -> None:
    """Each cell listed once, and no cell's path inside another's (their files would mix)."""
    paths = {path for _, path in cells}
    if len({cell for cell, _ in cells}) != len(cells) or len(paths) != len(cells):
        raise ConfigError(f"--merge {archive}: its manifest lists a cell or a cell path twice")
    for path in paths:
        parts = path.split("/")
        inner = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) in paths), None)
        if inner is not None:
            raise ConfigError(f"--merge {archive}: cell path {shown(path)} lies inside cell path {shown(inner)}")


def _place_all(grid: Experiment, task: TaskGrid, cells: list[tuple[Cell, str]], unpacked: Path,
               result: MergeResult) -> None:
    """The sweep's cells first, then the test grid's, each judged and placed (:func:`_place`)."""
    sweep, _, _ = grid_stages(grid, task)
    sweep_cells = set(sweep.cells()) if sweep is not None else set()
    for cell, path in [(c, p) for c, p in cells if c in sweep_cells]:
        _count(result, cell, _place(sweep, task, cell, unpacked, path))
    _, main, waits = grid_stages(grid, task)  # with the choice, once the sweep is complete here
    selected = getattr(getattr(grid, "selection", None), "method", None)
    for cell, path in [(c, p) for c, p in cells if c not in sweep_cells]:
        if cell not in set(main.cells()):
            outcome = ("refused", f"not a cell of {grid.name} here")
        elif waits and cell[1] == selected:
            outcome = ("refused", "the selection sweep is not complete here, so its choice is not known")
        else:
            outcome = _place(main, task, cell, unpacked, path)
        _count(result, cell, outcome)


def _count(result: MergeResult, cell: Cell, outcome: tuple[str, str]) -> None:
    kind, detail = outcome
    setattr(result, kind, getattr(result, kind) + 1)
    result.lines.append(f"{kind} {cell.name}: {detail}")


def _place(grid: Experiment, task: TaskGrid, cell: Cell, unpacked: Path, path: str) -> tuple[str, str]:
    """Judge the archived cell, recompute its scores and move it into place: ``(merged | kept |
    refused, detail)``."""
    source = unpacked / "cells" / path
    results = _read_results(source / "results.json")
    if results is None:
        return "refused", "the archive holds no readable results.json for it"
    group = results.get("setting", results.get("task"))  # without a group, a cell's results name the grid's task
    if (group, results.get("method"), results.get("seed")) != (cell.group or grid.task, cell.method, cell.seed):
        return "refused", (f"its results.json is of another cell ({shown(str(group), 40)}/"
                           f"{shown(str(results.get('method')), 40)}/{shown(str(results.get('seed')), 20)})")
    verdict = task.verdict(grid, cell, results)
    if verdict is None or verdict.kind != "fresh":
        detail = f"{verdict.kind}: {verdict.detail}" if verdict is not None else "its results record nothing to judge"
        return "refused", f"not the run this grid asks for ({detail})"
    target = Path(grid.run_config(cell).out_dir)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        here = judge(task, grid, cell).verdict
        state = "fresh results" if here is not None and here.kind == "fresh" else "files"
        return "kept", f"{target} already holds {state}; never overwritten"
    scored, why = _check_carried(grid, task, cell, results, source)
    if why is not None:
        return "refused", f"its scores do not hold here ({why})"
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir():
        target.rmdir()
    os.rename(source, target)
    _take_log(grid, cell, unpacked)
    return "merged", f"{target} (trained on {trained_on(results)}; {scored})"


def _check_carried(grid: Experiment, task: TaskGrid, cell: Cell, results: dict[str, Any],
                   source: Path) -> tuple[str, str | None]:
    """``(what became of the cell's scores, why they do not hold or None)``: the task's
    :meth:`~posenc.experiments.task_grid.TaskGrid.check_carried`."""
    return task.check_carried(grid, cell, results, source)


def _read_results(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _take_log(grid: Experiment, cell: Cell, unpacked: Path) -> None:
    """The cell's worker log into ``<root>/logs`` unless one of that name is there."""
    from posenc.experiments.scheduler import check_logs_dir, log_path

    name = log_path(grid, cell).name
    source = unpacked / "logs" / name
    if source.is_file():
        logs = check_logs_dir(grid)
        if not (logs / name).exists():
            shutil.copyfile(source, logs / name)


def _regenerate_report(grid: Experiment, task: TaskGrid, result: MergeResult) -> None:
    """The report from every fresh cell (``--report-only``); a grid whose report cannot be written
    (its selection sweep incomplete, a file it reads or writes refused) says why in the summary,
    after the lines of the cells already placed."""
    try:
        result.report = run_grid(grid, report_only=True, task=task)
    except PosencError as err:
        result.report_note = (str(err).splitlines() or [type(err).__name__])[0]
