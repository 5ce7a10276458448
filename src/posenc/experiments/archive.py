"""The archive of cells a timed session brings back: one ``.tar.gz`` holding, per grid, the run
directories of the cells it finished (without checkpoints: results, summaries, logs of training,
translations) and the worker logs of every cell it started, with a ``manifest.json`` saying which
grid (name, out_dir, the overrides it ran with) and which cells.

A lent GPU returns a handful of files and may be taken back before the session's own end, so
:class:`CellArchive` is rewritten atomically as each cell finishes, and only by a file under the
size limit (the last cells added are left out, and named, when it would not be).
:func:`open_archive` reads one back for :mod:`posenc.experiments.merge`: only folders and regular
files under relative names inside the archive are accepted.
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

from posenc.errors import ConfigError, RunDirError
from posenc.experiments.grid import Grid
from posenc.experiments.scheduler import log_path
from posenc.experiments.tasks import Cell
from posenc.runs.lock import LOCK_NAME
from posenc.runs.ownership import check_user_output

FORMAT = "posenc-cells/1"
MANIFEST = "manifest.json"
#: The most a file may weigh to come back from a lent GPU machine.
LIMIT_BYTES = 16 * 2**20
#: Entries of a run directory that never travel: the checkpoints (weights and optimizer states),
#: event files, the vocabulary's copy (the prepared data has it) and the lock.
LEFT_OUT = frozenset({"checkpoints", "tensorboard", "spm.model", LOCK_NAME})
#: What an archive read back may unpack to at most (a damaged or foreign file is refused).
MAX_UNPACKED = 2**30


def cell_files(run_dir: Path) -> list[Path]:
    """The files of ``run_dir`` that travel, sorted: all but :data:`LEFT_OUT`, ``*.safetensors``
    and links (none is followed)."""
    files = []
    for top, dirs, names in os.walk(run_dir):
        here = Path(top)
        if here == run_dir:
            dirs[:] = [d for d in dirs if d not in LEFT_OUT]
            names = [n for n in names if n not in LEFT_OUT]
        files += [here / n for n in names if not n.endswith(".safetensors") and not (here / n).is_symlink()
                  and (here / n).is_file()]
    return sorted(files)


@dataclass
class _ArchivedGrid:
    """One grid of the archive: what names it and its cells (path relative to the root) and logs."""

    name: str
    root: Path
    experiment: str
    overrides: list[str]
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

    def _grid(self, grid: Grid, experiment: str, overrides: list[str]) -> _ArchivedGrid:
        key = str(grid.exp.root)
        if key not in self.grids:
            self.grids[key] = _ArchivedGrid(str(grid.exp.name), Path(grid.exp.root), experiment, list(overrides))
        return self.grids[key]

    def started(self, grid: Grid, cell: Cell, experiment: str, overrides: list[str]) -> None:
        """``cell`` of ``grid`` (queued as ``experiment`` with ``overrides``) started: its log travels."""
        entry = self._grid(grid, experiment, overrides)
        name = log_path(grid.exp, cell).name
        if name not in entry.logs:
            entry.logs.append(name)

    def finished(self, grid: Grid, cell: Cell, experiment: str, overrides: list[str]) -> None:
        """``cell`` finished: its run directory travels (relative to the grid's root)."""
        entry = self._grid(grid, experiment, overrides)
        run_dir = Path(grid.config(cell).out_dir)
        try:
            entry.cells[Cell(*cell)] = run_dir.relative_to(entry.root).as_posix()
        except ValueError:
            raise ConfigError(f"cell {'/'.join(map(str, cell))}: its run directory {run_dir} lies outside the grid's "
                              f"out_dir {entry.root}") from None
        self.order.append((str(grid.exp.root), Cell(*cell)))

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
        self.left_out = ["/".join(map(str, cell)) for _, cell in self.order[self.held:]]
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
            for path in cell_files(run_dir):
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
                for path in cell_files(run_dir):
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


def check_archive_output(path: str | Path) -> None:
    """``--archive FILE``: a file the user names (:func:`posenc.runs.ownership.check_user_output`: not a
    directory, its directory exists, outside every posenc directory) that is new or a cell archive
    (a session run again into the same folder): any other file is refused, never overwritten."""
    check_user_output(path, "--archive")
    if not Path(path).exists():
        return
    try:
        tar, _ = open_archive(path)
    except ConfigError:
        raise RunDirError(f"--archive {path} is a file that is not a posenc cell archive; give a new file name "
                          "(it is never overwritten)") from None
    tar.close()


# ----------------------------------------------------------------------------- reading
def open_archive(path: str | Path) -> tuple[tarfile.TarFile, dict[str, Any]]:
    """The archive at ``path`` (open) and its manifest, after checking every member: a folder or a
    regular file under a relative name without ``..``, within :data:`MAX_UNPACKED` in all;
    anything else is a one-line ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--merge {path}: no such file")
    tar = None
    try:
        tar = tarfile.open(path, "r:gz")
        members = tar.getmembers()
        _check_members(path, members)
        return tar, _manifest(path, tar)
    except (tarfile.TarError, OSError, EOFError) as err:
        if tar is not None:
            tar.close()
        reason = (str(err).splitlines() or [type(err).__name__])[0]
        raise ConfigError(f"--merge {path}: not a posenc cell archive ({reason})") from None
    except BaseException:
        if tar is not None:
            tar.close()
        raise


def _check_members(path: Path, members: list[tarfile.TarInfo]) -> None:
    total = 0
    for m in members:
        parts = Path(m.name).parts
        if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
            raise ConfigError(f"--merge {path}: member {m.name!r} is not a file or folder under a relative name")
        total += m.size
    if total > MAX_UNPACKED:
        raise ConfigError(f"--merge {path}: unpacks to {total / 2**20:.0f} MiB, more than a cell archive holds")


def _manifest(path: Path, tar: tarfile.TarFile) -> dict[str, Any]:
    try:
        fh = tar.extractfile(MANIFEST)
        manifest = json.loads(fh.read().decode()) if fh is not None else None
    except (KeyError, ValueError, UnicodeDecodeError):
        manifest = None
    grids = manifest.get("grids") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(grids, list):
        raise ConfigError(f"--merge {path}: not a posenc cell archive (no {MANIFEST} of format {FORMAT})")
    return manifest


def extract_grid(tar: tarfile.TarFile, index: int, dest: Path) -> None:
    """Unpack the members of grid ``index`` (``grid<index>/...``) into ``dest``, whose ``cells/``
    and ``logs/`` then mirror the grid's run directories and logs."""
    prefix = f"grid{index}/"
    members = []
    for m in tar.getmembers():
        if m.name.startswith(prefix) and len(m.name) > len(prefix):
            m = m.replace(name=m.name[len(prefix):], deep=False)
            members.append(m)
    tar.extractall(dest, members=members, filter="data")
