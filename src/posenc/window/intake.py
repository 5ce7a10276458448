"""Reading back the archive a timed session brought (:mod:`posenc.window.archive`), as
untrusted input: it comes from another machine, so it is checked the way a download is, before
anything is unpacked.

The file is read once (at most :data:`MAX_ARCHIVE` bytes) and its tar stream walked header by
header, never unpacked to a size beyond :data:`MAX_UNPACKED`: ``manifest.json`` first (at most
:data:`~posenc.window.archive.MAX_RECORD`, no key twice), then every member a regular,
non-executable file under a plain relative name, present once, never both a file and a folder, laid
out as the archive writes it (``grid<i>/logs/<worker log>``, ``grid<i>/cells/<cell path>/<file>``),
within its size bound. The cells of the grid being merged are held to what a run directory of its
task carries (:func:`~posenc.window.archive.travelling_bound`: no checkpoint, lock or other
file); those of the archive's other grids are never unpacked and only bounded. Anything else is a
one-line ConfigError; memory stays within the archive's bytes and one manifest.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import tarfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.errors import ConfigError, RunDirError
from posenc.runs.ownership import check_user_output
from posenc.runs.spec import RunSpec
from posenc.window.archive import FORMAT, LIMIT_BYTES, MANIFEST, MAX_FILE, MAX_RECORD, travelling_bound

#: The most an archive file may weigh: twice what a session writes (:data:`LIMIT_BYTES`).
MAX_ARCHIVE = 2 * LIMIT_BYTES
#: The most its members may unpack to in all: 8 times :data:`LIMIT_BYTES`; committed cells and
#: worker logs gzip 3.0-5.7 to 1, so a full archive of real cells unpacks to at most about 92 MiB.
MAX_UNPACKED = 128 * 2**20
#: The most members an archive may hold (a committed Multi30k cell has 19 files, a lengthgen cell 8).
MAX_MEMBERS = 20_000
#: What the tar stream may add to the members' bytes (headers and padding of MAX_MEMBERS members).
_STREAM_SLACK = 32 * 2**20
#: The longest member name taken.
MAX_NAME = 512
_GRID_MEMBER = re.compile(r"^grid(0|[1-9]\d{0,3})/(logs|cells)/(.+)$")
#: A worker log (``<group>-<method>-seed<seed>.log``) or the GPU samples.
_LOG_NAME = re.compile(r"^(gpu\.csv|[^./][^/]*\.log)$")


@dataclass(frozen=True)
class GridRules:
    """What the archived grid being merged may hold: its index in the manifest, its cells' paths
    (under ``cells/``) and what a run directory of its task carries (``spec``)."""

    index: int
    cell_paths: frozenset[str]
    spec: RunSpec


@dataclass(frozen=True)
class CheckedArchive:
    """An archive whose every member was checked: its bytes, its manifest and its member names."""

    path: Path
    data: bytes = field(repr=False)
    manifest: dict[str, Any] = field(repr=False)
    names: tuple[str, ...] = field(repr=False)

    def extract_grid(self, index: int, dest: Path) -> None:
        """Unpack the members of grid ``index`` (``grid<index>/...``) into the new, empty ``dest``,
        whose ``cells/`` and ``logs/`` then mirror the grid's run directories and logs."""
        prefix = f"grid{index}/"
        with _tar_stream(self.data) as tar:
            for member in _members(tar):
                if not member.name.startswith(prefix):
                    continue
                target = dest / member.name[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None  # a regular file: checked when the archive was opened
                with source, open(target, "xb") as out:
                    shutil.copyfileobj(source, out)


def plain_name(name: str) -> bool:
    """Whether ``name`` is a plain relative '/'-separated path: no leading or doubled '/', no '.' or
    '..' part, no backslash or control character, at most :data:`MAX_NAME` characters."""
    parts = name.split("/")
    return (0 < len(name) <= MAX_NAME and all(part not in ("", ".", "..") for part in parts)
            and not any(c == "\\" or ord(c) < 32 or ord(c) == 127 for c in name))


def shown(name: str, width: int = 100) -> str:
    """``name`` quoted for a one-line message (control characters escaped, cut at ``width``)."""
    text = repr(name)
    return text if len(text) <= width else text[:width - 4] + "...'"


def open_archive(path: str | Path, rules: Callable[[dict[str, Any]], GridRules] | None = None) -> CheckedArchive:
    """The archive at ``path``, every member checked (module docstring) and nothing unpacked;
    ``rules`` gives, from the manifest, the grid being merged (its cells held to what its task's
    run directories carry). Anything else is a one-line ConfigError."""
    path = Path(path)
    data = _read_bounded(path)
    try:
        with _tar_stream(data) as tar:
            manifest, names = _walk(path, tar, rules)
    except _TooLarge:
        raise ConfigError(f"--merge {path}: unpacks to more than {MAX_UNPACKED // 2**20} MiB, more than a cell "
                          "archive holds") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
        reason = (str(err).splitlines() or [type(err).__name__])[0][:200]
        raise ConfigError(f"--merge {path}: not a posenc cell archive ({reason})") from None
    return CheckedArchive(path, data, manifest, tuple(names))


def _read_bounded(path: Path) -> bytes:
    """The bytes of the archive file (a one-line ConfigError when missing or over :data:`MAX_ARCHIVE`)."""
    if not path.is_file():
        raise ConfigError(f"--merge {path}: no such file")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_ARCHIVE + 1)
    except OSError as err:
        raise ConfigError(f"--merge {path}: cannot be read ({err.strerror or type(err).__name__})") from None
    if len(data) > MAX_ARCHIVE:
        raise ConfigError(f"--merge {path}: weighs more than {MAX_ARCHIVE // 2**20} MiB; a session writes "
                          f"at most {LIMIT_BYTES // 2**20} MiB")
    return data


class _TooLarge(Exception):
    """The tar stream unpacks to more than the bound."""


class _Bounded(io.RawIOBase):
    """A read-only stream that raises :class:`_TooLarge` once more than ``limit`` bytes were read."""

    def __init__(self, raw: Any, limit: int) -> None:
        super().__init__()
        self.raw, self.limit, self.count = raw, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        data = self.raw.read(len(view))
        self.count += len(data)
        if self.count > self.limit:
            raise _TooLarge
        view[:len(data)] = data
        return len(data)


@contextmanager
def _tar_stream(data: bytes) -> Iterator[tarfile.TarFile]:
    """The gzipped tar in ``data`` read as a stream (header by header, in order), never decompressed
    beyond :data:`MAX_UNPACKED` and the headers' slack."""
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
        bounded = io.BufferedReader(_Bounded(unzipped, MAX_UNPACKED + _STREAM_SLACK))
        with tarfile.open(fileobj=bounded, mode="r|") as tar:
            yield tar


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The members after those already read, one header at a time (a stream is read once, in order)."""
    while (member := tar.next()) is not None:
        yield member


def _walk(path: Path, tar: tarfile.TarFile, rules: Callable[[dict[str, Any]], GridRules] | None
          ) -> tuple[dict[str, Any], list[str]]:
    """The manifest (the first member) and every member's name, each checked as its header comes."""
    first = tar.next()
    if first is None or first.name != MANIFEST or not first.isreg():
        raise ConfigError(f"--merge {path}: not a posenc cell archive (no {MANIFEST} of format {FORMAT} "
                          "as its first member)")
    manifest = _manifest(path, tar, first)
    grid, unmergeable = None, None
    try:
        grid = rules(manifest) if rules is not None else None
    except ConfigError as err:  # no part to merge: said once the whole archive is checked
        unmergeable = err
    layout = _Layout(path, len(manifest["grids"]), grid)
    names, total = [MANIFEST], first.size
    for member in _members(tar):
        if len(names) >= MAX_MEMBERS:
            raise ConfigError(f"--merge {path}: holds more than {MAX_MEMBERS} members, more than a cell archive does")
        total += layout.check(member)
        if total > MAX_UNPACKED:
            raise _TooLarge
        names.append(member.name)
    if unmergeable is not None:
        raise unmergeable
    return manifest, names


def _manifest(path: Path, tar: tarfile.TarFile, member: tarfile.TarInfo) -> dict[str, Any]:
    """The manifest, read only when within :data:`MAX_RECORD`; JSON of format :data:`FORMAT` with
    a list of grids and no key twice (else a one-line ConfigError)."""
    if member.size > MAX_RECORD:
        raise ConfigError(f"--merge {path}: its {MANIFEST} is {member.size / 2**20:.1f} MiB, more than a manifest "
                          f"may be ({MAX_RECORD // 2**20} MiB)")
    source = tar.extractfile(member)
    try:
        manifest = json.loads(source.read(MAX_RECORD).decode() if source else "", object_pairs_hook=_unique_keys)
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"--merge {path}: its {MANIFEST} is not valid JSON ({str(err)[:200]})") from None
    grids = manifest.get("grids") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(grids, list):
        raise ConfigError(f"--merge {path}: not a posenc cell archive (no {MANIFEST} of format {FORMAT})")
    if not all(isinstance(g, dict) for g in manifest["grids"]):
        raise ConfigError(f"--merge {path}: its {MANIFEST} lists a grid that is not a mapping")
    return manifest


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"key {shown(twice, 60)} appears twice")
    return dict(pairs)


class _Layout:
    """The checks of one member after the manifest: its kind, name, place, uniqueness and size."""

    def __init__(self, path: Path, grids: int, rules: GridRules | None) -> None:
        self.path, self.grids, self.rules = path, grids, rules
        self.files: set[str] = {MANIFEST}
        self.folders: set[str] = set()

    def refuse(self, member: tarfile.TarInfo, why: str) -> ConfigError:
        return ConfigError(f"--merge {self.path}: member {shown(member.name)} {why}")

    def check(self, member: tarfile.TarInfo) -> int:
        """The member's size, after checking it (a one-line ConfigError naming what is wrong)."""
        name = member.name
        if not plain_name(name):
            raise self.refuse(member, "is not under a plain relative name")
        if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
            raise self.refuse(member, "is not a regular file (a folder, link, device or sparse file)")
        if member.mode & 0o111:
            raise self.refuse(member, "is executable; no file of a cell is")
        if name in self.files:
            raise self.refuse(member, "appears twice")
        parents = {name.rsplit("/", i)[0] for i in range(1, name.count("/") + 1)}
        if name in self.folders or parents & self.files:
            raise self.refuse(member, "is both a file and a folder")
        bound, what = self.bound(member)
        if member.size > bound:
            raise self.refuse(member, f"is {member.size / 2**20:.1f} MiB, more than {what} may be "
                                      f"({bound / 2**20:g} MiB)")
        self.files.add(name)
        self.folders |= parents
        return member.size

    def bound(self, member: tarfile.TarInfo) -> tuple[int, str]:
        """The most bytes the member may hold where it lies, and what it is (in words)."""
        match = _GRID_MEMBER.match(member.name)
        if match is None:
            raise self.refuse(member, "is not a file of a cell archive (manifest.json, grid<i>/logs/, grid<i>/cells/)")
        index, kind, rest = int(match[1]), match[2], match[3]
        if index >= self.grids:
            raise self.refuse(member, f"lies under grid{index}/, which the manifest does not list")
        if kind == "logs":
            if not _LOG_NAME.match(rest):
                raise self.refuse(member, "is not a worker log (<setting>-<method>-seed<seed>.log or gpu.csv)")
            return MAX_FILE, "a log"
        if self.rules is None or index != self.rules.index:
            return MAX_FILE, "a cell file"
        return self.cell_bound(member, rest)

    def cell_bound(self, member: tarfile.TarInfo, rest: str) -> tuple[int, str]:
        """The bound of a member of a cell of the grid being merged: a file its task's run carries."""
        assert self.rules is not None
        parts = rest.split("/")
        cell = next((i for i in range(1, len(parts)) if "/".join(parts[:i]) in self.rules.cell_paths), None)
        if cell is None:
            raise self.refuse(member, "lies in no cell the manifest lists")
        bound = travelling_bound(self.rules.spec, "/".join(parts[cell:]))
        if bound is None:
            raise self.refuse(member, "is not a file a cell carries (results, records, training logs, outputs; "
                                      "never checkpoints, locks or other files)")
        return bound, "that file"


def check_archive_output(path: str | Path) -> None:
    """``--archive FILE``: a file the user names (:func:`posenc.runs.ownership.check_user_output`: not a
    directory, its directory exists, outside every posenc directory) that is new or a cell archive
    (a session run again into the same folder): any other file is refused, never overwritten."""
    check_user_output(path, "--archive")
    if not Path(path).exists():
        return
    try:
        open_archive(path)
    except ConfigError:
        raise RunDirError(f"--archive {path} is a file that is not a posenc cell archive; give a new file name "
                          "(it is never overwritten)") from None
