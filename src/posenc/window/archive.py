"""The archive of cells a timed session brings back: one ``.tar.gz`` holding, per grid, the run
directories of the cells it finished (only the files a cell may carry, :func:`travelling_bound`:
results, records, logs of training, translations; never checkpoints, locks or anything else) and
the worker logs of every cell it started, with a ``manifest.json`` (its first member) saying which
grid (name, out_dir, the overrides it ran with) and which cells.

A lent GPU returns a handful of files and may be taken back before the session's own end, so
:class:`CellArchive` is rewritten atomically as each cell finishes, and only by a file under the
size limit (the last cells added are left out, and named, when it would not be).
:mod:`posenc.window.intake` reads one back, as untrusted input, for
:mod:`posenc.window.merge`.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.errors import ConfigError
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.scheduler import log_path
from posenc.runs.lock import LOCK_NAME
from posenc.runs.ownership import CONFIG_NAME, FINGERPRINT_NAME, MARKER_NAME
from posenc.runs.spec import NO_TASK, RunSpec, spec_of

FORMAT = "posenc-cells/1"
MANIFEST = "manifest.json"
#: The most a file may weigh to come back from a lent GPU machine.
LIMIT_BYTES = 16 * 2**20
#: Entries of a run directory that never travel: the checkpoints (weights and optimizer states),
#: event files, the vocabulary's copy (the prepared data has it) and the lock.
LEFT_OUT = frozenset({"checkpoints", "tensorboard", "spm.model", LOCK_NAME})
#: The records of every task's run directory that travel: posenc's marker, the run's config and
#: fingerprint, its summary and results.
RUN_RECORDS = frozenset({MARKER_NAME, CONFIG_NAME, FINGERPRINT_NAME, "summary.json", "results.json"})
#: The training logs of every task's run directory (the Trainer's CSVs).
RUN_LOGS = frozenset({"train.csv", "valid.csv"})
#: The most bytes a travelling record (JSON, YAML, the marker; the manifest too) may hold: the
#: largest committed one is 7 KiB, a manifest of 5,000 cells about 0.7 MiB.
MAX_RECORD = 2**20
#: The most bytes any other travelling file (hypotheses, CSV and worker logs) may hold: the archive's
#: own limit (the largest committed one is a 70 KiB hypothesis file).
MAX_FILE = LIMIT_BYTES


def travelling_bound(spec: RunSpec, name: str) -> int | None:
    """The most bytes the file ``name`` of a run directory of ``spec``'s task ('/'-separated,
    relative to it) may hold in an archive; None when it never travels. What travels: the
    :data:`RUN_RECORDS` and :data:`RUN_LOGS`, the task's own run files that are files, and in its
    run's directories (``translations/``) the names its pattern gives, temporaries (a leading dot,
    ``.tmp``) excepted; nothing of :data:`LEFT_OUT`, nothing deeper."""
    top, _, rest = name.partition("/")
    if top in LEFT_OUT:
        return None
    if not rest:
        travels = name in RUN_RECORDS | RUN_LOGS or (name in spec.run_files and name not in spec.run_dirs)
    else:
        pattern = spec.own_children().get(top)
        travels = (pattern is not None and "/" not in rest and bool(pattern.match(rest))
                   and not rest.startswith(".") and not rest.endswith(".tmp"))
    if not travels:
        return None
    return MAX_RECORD if name in RUN_RECORDS or name.endswith((".json", ".yaml")) else MAX_FILE


def cell_files(run_dir: Path, spec: RunSpec) -> list[Path]:
    """The files of ``run_dir`` (a run of ``spec``'s task) that travel, sorted: those
    :func:`travelling_bound` names, within their bound, that are regular files (no link is followed)."""
    files = []
    for top, dirs, names in os.walk(run_dir):
        here = Path(top)
        for name in names:
            path = here / name
            bound = travelling_bound(spec, path.relative_to(run_dir).as_posix())
            if bound is not None and not path.is_symlink() and path.is_file() and path.stat().st_size <= bound:
                files.append(path)
        dirs[:] = [d for d in dirs if here == run_dir and d not in LEFT_OUT]
    return sorted(files)


@dataclass
class _ArchivedGrid:
    """One grid of the archive: what names it and its cells (path relative to the root) and logs."""

    name: str
    root: Path
    experiment: str
    overrides: list[str]
    spec: RunSpec = NO_TASK  # what its task's run directories hold (which files travel)
    cells: dict[Cell, str] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)

    def logs_here(self) -> list[str]:
        """The logs to carry that exist now: the started cells' and the GPU samples (``gpu.csv``)."""
        return [n for n in [*self.logs, "gpu.csv"] if (self.root / "logs" / n).is_file()]

    def manifest(self, cells: list[Cell]) -> dict[str, Any]:
        """This grid's part of ``manifest.json`` for the finished ``cells`` it carries."""
        return {"name": self.name, "root": str(self.root), "experiment": self.experiment,
                "overrides": list(self.overrides), "logs": self.logs_here(),
                "cells": [{"group": c[0], "method": c[1], "seed": c[2], "path": self.cells[c]} for c in cells]}


class CellArchive:
    """The session's archive at ``path``: grids are registered as their cells start and finish;
    :meth:`write` rewrites the whole file (atomically) from what is on disk now."""

    def __init__(self, path: str | Path, limit: int = LIMIT_BYTES) -> None:
        self.path, self.limit = Path(path), limit
        self.grids: dict[str, _ArchivedGrid] = {}
        self.order: list[tuple[str, Cell]] = []  # finished cells, in the order they finished
        self.held = 0  # how many of them (the first) the file at ``path`` holds
        self.left_out: list[str] = []
        self.note = ""  # why the last write kept the file that was there
        self._sizes: dict[tuple[str, Cell], int] = {}  # each finished cell's files compressed alone

    def _grid(self, grid: Experiment, cell: Cell, experiment: str, overrides: list[str]) -> _ArchivedGrid:
        key = str(grid.root)
        if key not in self.grids:
            self.grids[key] = _ArchivedGrid(str(grid.name), Path(grid.root), experiment, list(overrides),
                                            spec_of(grid.run_config(cell)))
        return self.grids[key]

    def started(self, grid: Experiment, cell: Cell, experiment: str, overrides: list[str]) -> None:
        """``cell`` of ``grid`` (queued as ``experiment`` with ``overrides``) started: its log travels."""
        entry = self._grid(grid, Cell(*cell), experiment, overrides)
        name = log_path(grid, cell).name
        if name not in entry.logs:
            entry.logs.append(name)

    def finished(self, grid: Experiment, cell: Cell, experiment: str, overrides: list[str]) -> None:
        """``cell`` finished: its run directory travels (relative to the grid's root)."""
        entry = self._grid(grid, Cell(*cell), experiment, overrides)
        run_dir = Path(grid.run_config(cell).out_dir)
        try:
            entry.cells[Cell(*cell)] = run_dir.relative_to(entry.root).as_posix()
        except ValueError:
            raise ConfigError(f"cell {Cell(*cell).name}: its run directory {run_dir} lies outside the grid's "
                              f"out_dir {entry.root}") from None
        self.order.append((str(grid.root), Cell(*cell)))

    def cell_count(self) -> int:
        """How many finished cells the archive holds (after :meth:`write`)."""
        return self.held

    def write(self) -> Path:
        """Write the archive from the run directories and logs as they are now: the cells finished
        first, as many as fit under the limit (the others named in ``left_out``). Only a file under
        the limit replaces the one at ``path``, so the file there is always one that can come back;
        when even no cell fits (the logs alone are over it), the file there is kept (``note``)."""
        keep, self.note = self._fitting(), ""
        while True:
            tmp, size = self._write_tmp(self.order[:keep])
            if size <= self.limit:
                os.replace(tmp, self.path)
                self.held = keep
                break
            Path(tmp).unlink(missing_ok=True)
            if keep == 0:
                self.note = (f"even without cells the archive would be {size / 2**20:.1f} MiB: "
                             f"{self.path} kept as written before ({self.held} cells)")
                break
            keep -= 1
        self.left_out = [cell.name for _, cell in self.order[self.held:]]
        return self.path

    def _fitting(self) -> int:
        """How many of the first finished cells fit under the limit by their sizes compressed alone
        (each measured once: a finished cell's files do not change), so a write compresses the
        whole archive again only when the logs and the manifest tip it over."""
        total = 0
        for keep, key in enumerate(self.order):
            if key not in self._sizes:
                self._sizes[key] = self._cell_size(*key)
            total += self._sizes[key]
            if total > self.limit:
                return keep
        return len(self.order)

    def _cell_size(self, root: str, cell: Cell) -> int:
        """The size of ``cell``'s files (of the grid at ``root``) in a gzipped tar of their own."""
        entry = self.grids[root]
        run_dir = entry.root / entry.cells[cell]
        counter = _Counter()
        with tarfile.open(fileobj=counter, mode="w:gz") as tar:
            for path in cell_files(run_dir, entry.spec):
                tar.add(path, path.relative_to(run_dir).as_posix(), recursive=False)
        return counter.size

    def _write_tmp(self, cells: list[tuple[str, Cell]]) -> tuple[str, int]:
        """Write the archive of ``cells`` to a temporary sibling of ``path``: its name and size (on
        any error it is removed)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
                self._fill(tar, cells)
            os.chmod(tmp, 0o644)  # mkstemp made it 0600
            return tmp, os.path.getsize(tmp)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _fill(self, tar: tarfile.TarFile, cells: list[tuple[str, Cell]]) -> None:
        """The manifest, then per grid (``grid<i>/``) its logs and its finished cells' files."""
        grids = list(self.grids.values())
        parts = [entry.manifest([cell for key, cell in cells if key == str(entry.root)]) for entry in grids]
        manifest = {"format": FORMAT, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "grids": parts}
        _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=1).encode())
        for i, (entry, part) in enumerate(zip(grids, parts)):
            for log in part["logs"]:
                tar.add(entry.root / "logs" / log, f"grid{i}/logs/{log}", recursive=False)
            for cell in part["cells"]:
                run_dir = entry.root / cell["path"]
                for path in cell_files(run_dir, entry.spec):
                    tar.add(path, f"grid{i}/cells/{cell['path']}/{path.relative_to(run_dir).as_posix()}",
                            recursive=False)


class _Counter(io.RawIOBase):
    """A write-only sink that only counts the bytes written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        self.size += size
        return size


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
    tar.addfile(info, io.BytesIO(data))
