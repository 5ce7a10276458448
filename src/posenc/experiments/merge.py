"""``posenc experiment NAME --merge ARCHIVE``: the cells a timed session brought back
(:mod:`posenc.experiments.archive`) placed into this grid's out_dir, then its report regenerated.

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
from posenc.experiments.archive import extract_grid, open_archive
from posenc.experiments.grid import Grid, trained_on
from posenc.experiments.runner import grid_stages, run_grid
from posenc.experiments.tasks import Cell


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


def archived_grid(manifest: dict[str, Any], grid: Grid, archive: Path) -> tuple[int, dict[str, Any]]:
    """The archive's part for ``grid``: the one of its name at this out_dir, else the only one of its
    name (trained at another out_dir); a one-line ConfigError when none or several fit."""
    name, root = str(grid.exp.name), str(grid.exp.root)
    mine = [(i, g) for i, g in enumerate(manifest["grids"]) if isinstance(g, dict) and g.get("name") == name]
    here = [(i, g) for i, g in mine if g.get("root") == root]
    if here:
        return here[0]
    if len(mine) == 1:
        return mine[0]
    held = ", ".join(f"{g.get('name')} at {g.get('root')}" for g in manifest["grids"] if isinstance(g, dict)) or "none"
    if not mine:
        raise ConfigError(f"--merge {archive}: no cells of experiment {name} (it holds: {held})")
    raise ConfigError(f"--merge {archive}: several grids of experiment {name}, none at {root} ({held}); "
                      "give the out_dir= it was trained with")


def check_out_dir(grid: Grid) -> None:
    """The grid's out_dir may take merged cells, checked before anything is written there: a
    directory (or new) that is no posenc directory itself and lies in none (a run, prepared data, a
    report, ...), with its report and log directories new, empty or posenc's (one-line RunDirError)."""
    from posenc.experiments.runner import check_report_dir
    from posenc.experiments.scheduler import check_logs_target
    from posenc.runs.ownership import KIND_WORDS, check_outside_posenc_dirs, dir_kind

    root = Path(grid.exp.root)
    if root.exists() and not root.is_dir():
        raise RunDirError(f"out_dir {root} is a file, not a directory")
    kind = dir_kind(root)
    if kind is not None:
        raise RunDirError(f"out_dir {root} is a posenc {KIND_WORDS[kind]}, not an experiment's out_dir")
    check_outside_posenc_dirs(root, "out_dir")
    check_report_dir(grid.exp)
    check_logs_target(grid.exp)


def merge_archive(grid: Grid, archive: str | Path) -> MergeResult:
    """Place the archive's fresh cells of ``grid`` into its out_dir and regenerate its report."""
    archive = Path(archive)
    check_out_dir(grid)
    tar, manifest = open_archive(archive)
    result = MergeResult()
    with tar:
        index, part = archived_grid(manifest, grid, archive)
        cells = _cells(part, archive)
        root = Path(grid.exp.root)
        root.mkdir(parents=True, exist_ok=True)
        unpacked = Path(tempfile.mkdtemp(prefix=".merge-", dir=root))
        try:
            extract_grid(tar, index, unpacked)
            _place_all(grid, cells, unpacked, result)
        finally:
            shutil.rmtree(unpacked, ignore_errors=True)
    if result.merged:
        _regenerate_report(grid, result)
    else:
        result.report_note = "no cell merged"
    return result


def _cells(part: dict[str, Any], archive: Path) -> list[tuple[Cell, str]]:
    """``(cell, path under cells/)`` of an archived grid (a one-line ConfigError for a bad entry)."""
    out = []
    for c in part.get("cells") or []:
        try:
            cell, path = Cell(str(c["group"]), str(c["method"]), int(c["seed"])), str(c["path"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"--merge {archive}: a cell entry of its manifest is malformed ({c!r})") from None
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise ConfigError(f"--merge {archive}: cell path {path!r} is not relative")
        out.append((cell, path))
    return out


def _place_all(grid: Grid, cells: list[tuple[Cell, str]], unpacked: Path, result: MergeResult) -> None:
    """The sweep's cells first, then the test grid's, each judged and placed (:func:`_place`)."""
    sweep, _, _ = grid_stages(grid)
    sweep_cells = set(sweep.cells()) if sweep is not None else set()
    for cell, path in [(c, p) for c, p in cells if c in sweep_cells]:
        _count(result, cell, _place(sweep, cell, unpacked, path))
    _, main, waits = grid_stages(grid)  # with the choice, once the sweep is complete here
    selected = getattr(getattr(grid.exp, "selection", None), "method", None)
    for cell, path in [(c, p) for c, p in cells if c not in sweep_cells]:
        if cell not in set(main.cells()):
            outcome = ("refused", f"not a cell of {grid.exp.name} here")
        elif waits and cell[1] == selected:
            outcome = ("refused", "the selection sweep is not complete here, so its choice is not known")
        else:
            outcome = _place(main, cell, unpacked, path)
        _count(result, cell, outcome)


def _count(result: MergeResult, cell: Cell, outcome: tuple[str, str]) -> None:
    kind, detail = outcome
    setattr(result, kind, getattr(result, kind) + 1)
    result.lines.append(f"{kind} {'/'.join(map(str, cell))}: {detail}")


def _place(grid: Grid, cell: Cell, unpacked: Path, path: str) -> tuple[str, str]:
    """Judge the archived cell and move it into place: ``(merged | kept | refused, detail)``."""
    source = unpacked / "cells" / path
    results = _read_results(source / "results.json")
    if results is None:
        return "refused", "the archive holds no readable results.json for it"
    group = results.get("setting", results.get("task", cell[0]))
    if (group, results.get("method"), results.get("seed")) != tuple(cell):
        return "refused", f"its results.json is of another cell ({group}/{results.get('method')}/{results.get('seed')})"
    verdict = grid.task.verdict(grid.exp, cell, results)
    if verdict is None or verdict.kind != "fresh":
        detail = f"{verdict.kind}: {verdict.detail}" if verdict is not None else "its results record nothing to judge"
        return "refused", f"not the run this grid asks for ({detail})"
    target = Path(grid.config(cell).out_dir)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        here = grid.verdict(cell)
        state = "fresh results" if here is not None and here.kind == "fresh" else "files"
        return "kept", f"{target} already holds {state}; never overwritten"
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir():
        target.rmdir()
    os.rename(source, target)
    _take_log(grid, cell, unpacked)
    return "merged", f"{target} (trained on {trained_on(results)})"


def _read_results(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _take_log(grid: Grid, cell: Cell, unpacked: Path) -> None:
    """The cell's worker log into ``<root>/logs`` unless one of that name is there."""
    from posenc.experiments.scheduler import check_logs_dir, log_path

    name = log_path(grid.exp, cell).name
    source = unpacked / "logs" / name
    if source.is_file():
        logs = check_logs_dir(grid.exp)
        if not (logs / name).exists():
            shutil.copyfile(source, logs / name)


def _regenerate_report(grid: Grid, result: MergeResult) -> None:
    """The report from every fresh cell (``--report-only``); a grid whose report cannot be written
    (its selection sweep incomplete, a file it reads or writes refused) says why in the summary,
    after the lines of the cells already placed."""
    try:
        result.report = run_grid(grid.exp, report_only=True, task=grid.task)
    except PosencError as err:
        result.report_note = (str(err).splitlines() or [type(err).__name__])[0]
