"""The prepared data a timed session carries: every data directory the queue's cells read,
prepared here beforehand (corpus, dataset setting, SentencePiece model, splits), so the lent machine
prepares nothing and downloads nothing.

:func:`pack` prepares them (each grid's own ``prepare``: idempotent, a prepared directory is kept)
and writes one ``data.tar.gz`` into a folder, each distinct data config once (under the digest of
its data fingerprint), with ``payload.json`` listing them. :func:`place` puts each one back where a
queue cell looks for its prepared data (``prepared_dir`` of its run config) when nothing is there
yet; prepared data already there is kept (the task checks its fingerprint before training), and a
directory holding anything else is refused in one line before anything is placed. A task's run
config that has no ``prepared_dir`` carries nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from posenc.errors import ConfigError, RunDirError
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.tasks import task_of
from posenc.files import atomic_output, atomic_write_text, os_call, os_errors
from posenc.runs.fingerprint import data_fingerprint, digest
from posenc.runs.ownership import check_outside_posenc_dirs, check_target, write_marker
from posenc.runs.spec import spec_of

FORMAT = "posenc-payload/1"
DATA_ARCHIVE, INDEX = "data.tar.gz", "payload.json"
#: The marker kind of a folder ``pack`` wrote (posenc.runs.ownership).
PACK_KIND = "payload"


def data_dirs(cells: list[tuple[Experiment, Cell]]) -> dict[str, tuple[dict[str, Any], list[Path]]]:
    """``{digest: (data fingerprint, [prepared directories])}`` of the cells' run configs: each data
    config once, with every place a cell reads it from (grids at other out_dirs share a config)."""
    found: dict[str, tuple[dict[str, Any], list[Path]]] = {}
    for grid, cell in cells:
        cfg = grid.run_config(cell)
        where = getattr(cfg, "prepared_dir", None)
        if where is not None and hasattr(cfg, "data"):
            data = data_fingerprint(cfg.data, spec_of(cfg))
            _, places = found.setdefault(digest(data), (data, []))
            if Path(where) not in places:
                places.append(Path(where))
    return found


def pack(cells: list[tuple[Experiment, Cell]], out: Path) -> str:
    """Prepare every data directory of ``cells`` (a queue's, with their grids) here and write them to
    ``out`` (``data.tar.gz`` and ``payload.json``); returns one line saying what and how much. ``out``
    is checked first (:func:`check_pack_target`); each file is written atomically, the index last,
    so a failure leaves no temporary file and no index that does not describe the archive."""
    check_pack_target(out)
    dirs = data_dirs(cells)
    _prepare(cells, {places[0] for _, places in dirs.values()})
    os_call(lambda: out.mkdir(parents=True, exist_ok=True), out)
    write_marker(out, PACK_KIND)
    os_call(lambda: (out / INDEX).unlink(missing_ok=True), out / INDEX)  # an old index never describes a new archive
    index: dict[str, Any] = {"format": FORMAT, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "dirs": {}}
    with os_errors(str(out / DATA_ARCHIVE)), atomic_output(out / DATA_ARCHIVE, binary=True) as fh, \
            tarfile.open(fileobj=fh, mode="w:gz") as tar:
        for key, (data, places) in sorted(dirs.items()):
            index["dirs"][key] = _add_dir(tar, key, places[0]) | {"data": data,
                                                                     "for": [str(p) for p in places]}
    atomic_write_text(out / INDEX, json.dumps(index, indent=1))
    raw = sum(d["bytes"] for d in index["dirs"].values())
    packed = (out / DATA_ARCHIVE).stat().st_size
    return (f"packed {len(dirs)} prepared data directories ({raw / 2**20:.1f} MiB) into {out / DATA_ARCHIVE} "
            f"({packed / 2**20:.1f} MiB)")


def check_pack_target(out: Path) -> None:
    """``pack DIR``: a new or empty folder, or one ``pack`` wrote, outside every posenc directory;
    a one-line RunDirError otherwise."""
    check_outside_posenc_dirs(out, "pack folder")
    check_target(out, PACK_KIND, "pack folder")


def _prepare(cells: list[tuple[Experiment, Cell]], first: set[Path]) -> None:
    """Each grid's ``prepare`` of its cells reading one of the ``first`` directories (each data
    config is prepared and packed once); a grid with none of them is not asked (nothing is written
    into its out_dir)."""
    for grid in {id(g): g for g, _ in cells}.values():
        todo = [c for g, c in cells if g is grid and Path(g.run_config(c).prepared_dir) in first]
        if todo:
            task_of(grid).prepare(grid, todo)


def _add_dir(tar: tarfile.TarFile, key: str, where: Path) -> dict[str, Any]:
    """The regular files of the prepared directory ``where`` into ``tar`` under ``key/``; its index entry."""
    files = sorted(p for p in where.iterdir() if p.is_file() and not p.is_symlink())
    for p in files:
        tar.add(p, f"{key}/{p.name}", recursive=False)
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def read_index(payload: Path) -> dict[str, Any]:
    """``payload.json`` of a packed folder (one-line ConfigError when it is not one)."""
    try:
        index = json.loads((payload / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        index = None
    if not isinstance(index, dict) or index.get("format") != FORMAT or not (payload / DATA_ARCHIVE).is_file():
        raise ConfigError(f"{payload}: not a packed payload (no {INDEX} of format {FORMAT} beside {DATA_ARCHIVE}); "
                          "run `gpu_session.sh pack` first")
    return index


def place(cells: list[tuple[Experiment, Cell]], payload: Path) -> str:
    """Put each packed data directory where one of ``cells`` reads it, where nothing is yet; one
    line saying how many were placed, kept and missing from the payload. Every target is checked
    before any is placed: one that holds files but no prepared data is a one-line RunDirError."""
    index = read_index(payload)
    todo, kept, missing = _targets(index, data_dirs(cells))
    try:
        with os_errors(str(payload / DATA_ARCHIVE)), tarfile.open(payload / DATA_ARCHIVE, "r:gz") as tar:
            members = tar.getmembers()
            for key, where in todo:
                _unpack(tar, [m for m in members if m.name.startswith(f"{key}/")], key, where)
    except (tarfile.TarError, EOFError) as err:
        raise ConfigError(f"{payload / DATA_ARCHIVE}: not readable ({err}); run `gpu_session.sh pack` again") from None
    gone = f", {len(missing)} not in the payload (e.g. {missing[0]}: pack again)" if missing else ""
    return f"payload: placed {len(todo)} prepared data directories, kept {kept} already here{gone}"


def _targets(index: dict[str, Any], wanted: dict[str, tuple[Any, list[Path]]]) -> tuple[list[tuple[str, Path]], int,
                                                                                        list[str]]:
    """``(to place as (key, directory), kept, missing)``: a directory holding prepared data is kept,
    one the payload lacks is missing; one holding anything else is refused (one line)."""
    todo, kept, missing = [], 0, []
    for key, (_, places) in wanted.items():
        for where in places:
            if (where / "meta.json").is_file():
                kept += 1
            elif where.exists() and not (where.is_dir() and not any(where.iterdir())):
                raise RunDirError(f"payload: {where} holds files but no prepared data (no meta.json), so the packed "
                                  "data cannot be placed there; move it away and run again")
            elif key not in index["dirs"]:
                missing.append(str(where))
            else:
                todo.append((key, where))
    return todo, kept, missing


def _unpack(tar: tarfile.TarFile, members: list[tarfile.TarInfo], key: str, where: Path) -> None:
    """Unpack the members of ``key`` into a new directory ``where`` (built aside, then renamed)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{where.name}.", dir=where.parent))
    try:
        flat = [m.replace(name=m.name[len(key) + 1:], deep=False) for m in members if m.isfile()]
        tar.extractall(tmp, members=flat, filter="data")
        if where.is_dir() and not any(where.iterdir()):
            where.rmdir()
        os.rename(tmp, where)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
