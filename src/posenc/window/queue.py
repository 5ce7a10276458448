"""A queue of grid cells for a timed session (a lent GPU's window): a YAML file listing
experiments in priority order, each with the overrides that place it on that machine, an optional
subset of its cells (settings, methods, seeds) and the minutes one of its cells was recorded to
take there.

:func:`run_queue` works through the entries until a deadline: of each entry's cells (the
selection sweep's first, where the grid has one) it trains those that have no results here and no
run directory yet, with the grid's own scheduler (``--jobs``, default ``auto``), starting a cell
only while it can still finish (:class:`~posenc.window.deadline.CellGate`); committed cells
(fresh by the grid's verdict) are skipped, and cells whose stored results differ are left alone
(their checkpoints are not here). Every finished cell goes into the session's archive
(:class:`~posenc.window.archive.CellArchive`), rewritten as each one finishes. Nothing is
prepared or downloaded here when the data was packed (:mod:`posenc.window.payload`).

A queue entry's overrides that say where a grid trains (``base.train.device=cuda``,
``base.train.precision=fp32`` for a grid whose base says ``device: cpu``) do not change a run's
identity: ``train.device`` is a placement key of the fingerprint, and a run trained in the explicit
precision answers the grid's own ``precision: auto`` (:data:`~posenc.runs.fingerprint.PLACED_WHEN_AUTO`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from posenc.config import from_dict, load_yaml, naming, require
from posenc.errors import ConfigError, PosencError
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.judgements import judge
from posenc.experiments.runner import grid_stages, load_grid
from posenc.experiments.scheduler import parse_jobs, run_local
from posenc.experiments.subset import CellSubset
from posenc.experiments.task_grid import TaskGrid
from posenc.experiments.tasks import task_of
from posenc.files import os_error_message
from posenc.window.archive import CellArchive
from posenc.window.deadline import CellGate
from posenc.window.payload import place


@dataclass
class QueueEntry:
    """One experiment of the queue: its ``overrides``, the cells wanted (empty: every one) and
    ``cell_minutes``, what one cell was recorded to take on the target machine (packed with the
    others of ``jobs``) until one has finished in the session."""

    experiment: str = ""
    cell_minutes: float = 0.0
    overrides: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    jobs: int | str = "auto"
    note: str = ""

    def __post_init__(self) -> None:
        require(bool(self.experiment), "queue entry: name its experiment (a shipped name or a YAML path)")
        require(self.cell_minutes > 0, f"queue entry {self.experiment}: cell_minutes must be > 0 (the recorded "
                                       "minutes of one cell on the target machine)")
        parse_jobs(self.jobs)

    @property
    def subset(self) -> CellSubset:
        """The cells this entry asks for (every filter empty or naming them)."""
        return CellSubset.of(self.settings, self.methods, self.seeds)

    def wants(self, cell: Cell) -> bool:
        return self.subset.wants(cell)

    def label(self) -> str:
        """The entry in a line: its experiment and the subset it asks for."""
        subset = {"settings": self.settings, "methods": self.methods, "seeds": self.seeds}
        parts = [f"{name} {','.join(map(str, values))}" for name, values in subset.items() if values]
        return self.experiment + (f" [{'; '.join(parts)}]" if parts else "")


@dataclass
class Queue:
    """The queue file: ``entries`` in priority order."""

    entries: list[QueueEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        require(len(self.entries) >= 1, "the queue lists no entries")


def load_queue(path: str | Path) -> Queue:
    """The queue file at ``path`` (one-line ConfigError naming the file for a bad one)."""
    with naming(path):
        return from_dict(Queue, load_yaml(path))


def entry_grid(entry: QueueEntry) -> Experiment:
    """The grid of ``entry`` with its overrides; a subset naming no label of the grid is a one-line
    ConfigError (a typo would otherwise select nothing)."""
    grid = load_grid(entry.experiment, entry.overrides)
    entry.subset.check(grid, grid_stages(grid, task_of(grid))[0], f"queue entry {entry.experiment}")
    return grid


def entry_cells(entry: QueueEntry, grid: Experiment) -> list[tuple[Experiment, Cell]]:
    """Every cell ``entry`` asks for with the grid it belongs to: the selection sweep's, then the
    test grid's (with the sweep's choice, when the sweep is complete here)."""
    sweep, main, _ = grid_stages(grid, task_of(grid))
    stages = ([sweep] if sweep is not None else []) + [main]
    return [(stage, cell) for stage in stages for cell in stage.cells() if entry.wants(cell)]


def blocker(grid: Experiment, task: TaskGrid, cell: Cell) -> str | None:
    """Why ``cell`` is not trained in this session: '' when it is committed (fresh results here),
    a reason when its results here differ (scoring or extending needs its checkpoints, which never
    travel) or its run directory already holds something; None when it is to be trained."""
    verdict = judge(task, grid, cell).verdict
    if verdict is not None:
        return "" if verdict.kind == "fresh" else f"{verdict.kind} results here ({verdict.detail})"
    run_dir = Path(grid.run_config(cell).out_dir)
    if run_dir.is_dir() and any(run_dir.iterdir()):
        return f"{run_dir} already holds a run without results"
    return None


@dataclass
class EntryCount:
    """What became of one entry's cells in the session."""

    committed: int = 0
    finished: int = 0
    failed: int = 0
    refused: int = 0
    not_archived: int = 0
    blocked: list[str] = field(default_factory=list)

    def waited(self) -> None:
        """A cell that was waiting for a free slot when the deadline came: never started."""
        self.refused += 1

    def line(self, entry: QueueEntry, gate: CellGate, total: int) -> str:
        """The entry's line: of its ``total`` cells how many were committed, finished (and of those
        not archived), failed or cut, not started (and why) and left alone (with the first reason)."""
        lost = f" ({self.not_archived} not archived)" if self.not_archived else ""
        refused = f", {self.refused} not started ({gate.why_not()})" if self.refused else ""
        blocked = f", {len(self.blocked)} left alone (e.g. {self.blocked[0]})" if self.blocked else ""
        return (f"{entry.label()}: {total} cells: {self.committed} committed, {self.finished} finished{lost}, "
                f"{self.failed} failed or cut{refused}{blocked}")


class QueueSession:
    """One timed session over a queue: the deadline ``until`` (wall clock) and the archive."""

    def __init__(self, until: float, archive: CellArchive) -> None:
        self.until, self.archive = until, archive
        self.counts: list[EntryCount] = []  # every entry's so far (an interrupted one's too)

    def run(self, queue: Queue) -> None:
        """Every entry in order; the archive is written and the session's line printed at the end,
        however the session ends (SIGINT at an outer limit too)."""
        try:
            for i, entry in enumerate(queue.entries, 1):
                print(f"queue entry {i}/{len(queue.entries)}: {self.run_entry(entry)}", flush=True)
        finally:
            self._write_archive()
            print(self.line(), flush=True)

    def run_entry(self, entry: QueueEntry) -> str:
        """Train what ``entry`` asks for until the deadline; its summary line."""
        gate = CellGate(self.until, entry.cell_minutes * 60)
        count = EntryCount()
        self.counts.append(count)
        try:
            grid = entry_grid(entry)
            cells = self._stage_cells(entry, grid, gate, count, sweep=True)
            cells += self._stage_cells(entry, grid, gate, count, sweep=False)
        except PosencError as err:
            return f"{entry.label()}: skipped: {err}"
        return count.line(entry, gate, cells)

    def _stage_cells(self, entry: QueueEntry, grid: Experiment, gate: CellGate, count: EntryCount, sweep: bool) -> int:
        """Run one stage of the entry (the selection sweep, or the test grid); how many cells it asked for."""
        task = task_of(grid)
        stage_sweep, main, waits = grid_stages(grid, task)
        stage = stage_sweep if sweep else main
        if stage is None:
            return 0
        cells = [c for c in stage.cells() if entry.wants(c)]
        selected = getattr(getattr(grid, "selection", None), "method", None)
        todo = []
        for cell in cells:
            waiting = not sweep and waits and cell[1] == selected
            why = "waits for the selection sweep" if waiting else blocker(stage, task, cell)
            if why is None:
                todo.append(cell)
            elif why == "":
                count.committed += 1
            else:
                count.blocked.append(f"{Cell(*cell).name}: {why}")
        self._train(entry, stage, task, todo, gate, count)
        return len(cells)

    def _train(self, entry: QueueEntry, grid: Experiment, task: TaskGrid, cells: list[Cell], gate: CellGate,
               count: EntryCount) -> None:
        """Train ``cells`` of ``grid`` with the gate; count what became of them."""
        if not cells:
            return
        if not gate.fits():
            count.refused += len(cells)
            return
        # placed from a payload, the data is only checked; without one, prepared (downloaded)
        task.prepare(grid, cells)
        refused_before = len(gate.refused)
        run_local(grid, task, cells, parse_jobs(entry.jobs), admit=self._admit(entry, grid, gate), stop_at=self.until,
                  after=self._after(entry, grid, task, gate, count), dropped=lambda _cell: count.waited())
        count.refused += len(gate.refused) - refused_before

    def _admit(self, entry: QueueEntry, grid: Experiment, gate: CellGate) -> Callable[[Cell], bool]:
        """The pool's ``admit``: the gate's answer; a started cell's log joins the archive."""

        def admit(cell: Cell) -> bool:
            if not gate.admit(cell):
                return False
            self.archive.started(grid, cell, entry.experiment, entry.overrides)
            return True

        return admit

    def _after(self, entry: QueueEntry, grid: Experiment, task: TaskGrid, gate: CellGate,
               count: EntryCount) -> Callable[[Cell, int], None]:
        """Called as a worker ends: a cell with fresh results is measured and archived (the archive
        rewritten now), anything else counted as failed or cut."""

        def after(cell: Cell, rc: int) -> None:
            verdict = judge(task, grid, cell).verdict if rc == 0 else None
            fresh = verdict is not None and verdict.kind == "fresh"
            if fresh:
                gate.done(cell)
                count.finished += 1
            else:
                count.failed += 1
            archived = self._archived(entry, grid, cell if fresh else None)
            if fresh and not archived:
                count.not_archived += 1

        return after

    def _archived(self, entry: QueueEntry, grid: Experiment, cell: Cell | None) -> bool:
        """Add the finished ``cell`` (None: a failed one, whose log is already listed) to the archive
        and rewrite it; an error is one line and False, never an exception through the process
        pool, which would stop every cell still training."""
        try:
            if cell is not None:
                self.archive.finished(grid, cell, entry.experiment, entry.overrides)
            self.archive.write()
        except (PosencError, OSError) as err:
            what = f"{Cell(*cell).name} not archived" if cell is not None else "not rewritten"
            print(f"archive: {what}: {_one_line(err)}", flush=True)
            return False
        return True

    def _write_archive(self) -> None:
        """The archive rewritten as the session ends; an error is one line (the last written stays)."""
        try:
            self.archive.write()
        except (PosencError, OSError) as err:
            print(f"archive: not rewritten at the end: {_one_line(err)}", flush=True)

    def line(self) -> str:
        """The session's last line: what the queue gave and where the archive is."""
        archive = self.archive
        size = archive.path.stat().st_size / 2**20 if archive.path.is_file() else 0.0
        over = (f"; left out over {archive.limit // 2**20} MiB: {', '.join(archive.left_out)}"
                if archive.left_out else "") + (f"; {archive.note}" if archive.note else "")
        finished, failed = sum(c.finished for c in self.counts), sum(c.failed for c in self.counts)
        refused, blocked = sum(c.refused for c in self.counts), sum(len(c.blocked) for c in self.counts)
        lost = sum(c.not_archived for c in self.counts)
        lost_text = f" ({lost} not archived)" if lost else ""
        return (f"queue: {finished} cells finished{lost_text}, {failed} failed or cut, {refused} not started "
                f"(deadline), {blocked} left alone; archive {archive.path} ({archive.cell_count()} cells, "
                f"{size:.2f} MiB){over}")


def _one_line(err: BaseException) -> str:
    """An error's message in one line (an OSError with its file: ``FILE: reason``)."""
    if isinstance(err, OSError):
        return os_error_message(err, "the archive")
    return (str(err).splitlines() or [type(err).__name__])[0]


def run_queue(path: str | Path, until: float, archive: str | Path, payload: str | Path | None = None) -> QueueSession:
    """Run the queue file ``path`` until ``until`` (wall clock, :func:`time.time` seconds), the
    finished cells archived at ``archive``; prepared data first placed from ``payload`` (a folder
    ``posenc queue pack`` wrote), when given."""
    queue = load_queue(path)
    if payload is not None:
        print(place(queue_cells(queue), Path(payload)), flush=True)
    session = QueueSession(until, CellArchive(archive))
    session.run(queue)
    return session


def queue_cells(queue: Queue) -> list[tuple[Experiment, Cell]]:
    """Every cell the queue's entries ask for, with its grid (what :mod:`~posenc.window.payload` packs)."""
    return [pair for entry, grid in check_entries(queue) for pair in entry_cells(entry, grid)]


def check_entries(queue: Queue) -> list[tuple[QueueEntry, Experiment]]:
    """Every entry with its grid (a one-line ConfigError naming the entry for a bad one)."""
    out = []
    for i, entry in enumerate(queue.entries, 1):
        try:
            out.append((entry, entry_grid(entry)))
        except ConfigError as err:
            raise ConfigError(f"queue entry {i} ({entry.experiment}): {err}") from None
    return out

