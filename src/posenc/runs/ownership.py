"""Which directories are posenc's: ownership markers and the rule that posenc writes only into a
directory that is new, empty, or its own (:func:`check_target`), and never an output inside one
of its own directories (:func:`check_outside_posenc_dirs`).

posenc's directories carry a marker file, ``.posenc-run`` (JSON ``{"kind": "run"}``, ``"data"``,
``"report"``, ...), written when posenc first fills them; the caches the tasks keep beside their
prepared data are posenc's by their names. A directory an older posenc left unmarked is marked by
``posenc upgrade`` (:mod:`posenc.runs.upgrade`), once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from posenc.errors import ConfigError, RunDirError
from posenc.files import atomic_write_text, check_output_file, os_call
from posenc.runs.lock import LOCK_NAME, in_use
from posenc.runs.spec import declared
from posenc.training.checkpoint import foreign_files

MARKER_NAME = ".posenc-run"
CONFIG_NAME, FINGERPRINT_NAME = "config.yaml", "fingerprint.json"
#: Checkpoint directories inside ``checkpoints/``: only their checkpoint files are posenc's.
CHECKPOINT_DIR = re.compile(r"^(ckpt_\d{8}|average)$")
KIND_WORDS = {"run": "run directory", "data": "prepared data directory", "report": "report directory",
              "logs": "log directory", "export": "model export directory", "checkpoint": "checkpoint directory",
              "datasets": "directory of prepared data", "cache": "data cache",
              "payload": "folder of packed data"}
#: The description file of a model export (serving/).
EXPORT_MANIFEST = "posenc_export.json"
#: Files of a checkpoint directory (training/checkpoint.py): an average written elsewhere, a moved checkpoint.
_CHECKPOINT_SIGNS = ("model.safetensors", "state.json")


def read_marker(directory: str | Path) -> str | None:
    """What ``directory``'s marker file says it is.

    Args:
        directory: the directory to ask.

    Returns:
        The kind its marker records (``run``, ``data``, ...); None when it has no marker, the
        marker is a symlink or does not read as a JSON object.
    """
    path = Path(directory) / MARKER_NAME
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("kind") if isinstance(data, dict) else None


def cache_names() -> frozenset[str]:
    """The names of the cache directories the declared tasks keep beside their prepared data: the
    name is posenc's, so such a directory is posenc's cache, marked or not.

    Returns:
        Every declared spec's :attr:`~posenc.runs.spec.RunSpec.caches`.
    """
    return frozenset(name for spec in declared() for name in spec.caches)


def scratch_names() -> frozenset[str]:
    """Names posenc may leave in a directory besides its marked contents, so a directory holding
    only these counts as empty.

    Returns:
        The lock's and the marker's names and :func:`cache_names`.
    """
    return frozenset({LOCK_NAME, MARKER_NAME}) | cache_names()


def dir_kind(directory: str | Path) -> str | None:
    """The kind of a directory posenc wrote.

    Args:
        directory: the directory to look at.

    Returns:
        Its marker's kind (``run``, ``data``, ``report``, ``logs``, ``export``, ``datasets``, ...),
        ``cache`` for a task's data cache (known by its name), or None: not a directory posenc
        wrote (or not a directory, or a symlink).
    """
    directory = Path(directory)
    if not directory.is_dir() or directory.is_symlink():
        return None
    return read_marker(directory) or ("cache" if directory.name in cache_names() else None)


def marker_text(kind: str) -> str:
    """The marker file's text for a directory of ``kind``.

    Args:
        kind: what the directory is, a key of :data:`KIND_WORDS`.

    Returns:
        One JSON line naming ``kind`` and posenc as its writer.
    """
    return json.dumps({"kind": kind, "written_by": "posenc"}) + "\n"


def write_marker(directory: str | Path, kind: str) -> None:
    """Mark ``directory`` as posenc's own ``kind`` (no-op when it already is).

    Args:
        directory: an existing directory posenc writes.
        kind: what it is, a key of :data:`KIND_WORDS` (``run``, ``data``, ``report``, ...).
    """
    if read_marker(directory) != kind:
        atomic_write_text(Path(directory) / MARKER_NAME, marker_text(kind))


def _forbidden(directory: Path) -> str | None:
    real = directory.resolve()
    if real == Path(real.anchor):
        return "the filesystem root"
    if real == Path.home().resolve():
        return "your home directory"
    return None


def _foreign_entries(directory: Path, kind: str) -> list[str]:
    """Entries of ``directory`` that posenc did not put there (for an unmarked ``kind`` dir):
    all but its lock, marker and caches, and in a run data that posenc prepared."""
    def ours(p: Path) -> bool:
        return p.name in scratch_names() or (kind == "run" and dir_kind(p) == "data")

    return sorted(p.name for p in directory.iterdir() if not ours(p))


def check_target(directory: str | Path, kind: str, what: str = "out_dir") -> None:
    """Refuse (one-line :class:`RunDirError`) to write the ``kind`` directory ``directory``
    unless it is new, empty (but for posenc's lock and caches, and not marked as posenc's of another
    kind) or posenc's own ``kind``.

    Args:
        directory: the directory about to be written.
        kind: what posenc writes there, a key of :data:`KIND_WORDS`.
        what: how the user named it, for the message (``out_dir``, ``--output``).

    Raises:
        RunDirError: ``directory`` is the filesystem root or the home directory, a dangling
            symlink, a file, a posenc directory of another kind, or holds files posenc did not write.
    """
    directory = Path(directory)
    where = _forbidden(directory)
    if where is not None:
        raise RunDirError(f"{what} {directory} is {where}; posenc writes only into a new or empty directory or its own")
    if directory.is_symlink() and not directory.is_dir():
        raise RunDirError(f"{what} {directory} is a dangling symlink")
    if not directory.exists():
        return
    if not directory.is_dir():
        raise RunDirError(f"{what} {directory} is a file, not a directory")
    other = dir_kind(directory)
    if other == kind:
        return
    foreign = os_call(lambda: _foreign_entries(directory, kind), directory)
    if foreign or other is not None:  # a posenc directory of another kind is never written as this one
        held = f"a posenc {KIND_WORDS[other]}" if other else f"files posenc did not write ({foreign[0]!r}"
        held += "" if other else (f" and {len(foreign) - 1} more)" if len(foreign) > 1 else ")")
        older = "" if other else f", or `posenc upgrade {directory}` if an older posenc wrote it"
        raise RunDirError(f"{what} {directory} holds {held}; posenc writes only into a new or empty directory "
                          f"or a {KIND_WORDS[kind]} it created (use another {what}{older})")


def mark_datasets(directory: str | Path) -> None:
    """Make ``directory``, where an experiment keeps its prepared data directories and their
    caches, posenc's ``datasets`` directory (created if new), so no output is written
    into it (:func:`check_outside_posenc_dirs`). One that holds anything else (or is a symlink) is left
    as it is, unmarked: it is not only posenc's.

    Args:
        directory: the directory that holds (or will hold) an experiment's prepared data.
    """
    directory = Path(directory)
    if read_marker(directory) == "datasets" or directory.is_symlink():
        return
    if directory.exists() and not (directory.is_dir() and _holds_only_data(directory)):
        return
    os_call(lambda: directory.mkdir(parents=True, exist_ok=True), directory)
    write_marker(directory, "datasets")


def _holds_only_data(directory: Path) -> bool:
    """Whether every entry of ``directory`` is prepared data, a cache or a lock."""
    return all(p.name in scratch_names() or dir_kind(p) == "data" for p in directory.iterdir())


def owned_kind(directory: Path) -> str | None:
    """Whether posenc owns ``directory``, and as what.

    Args:
        directory: the directory to ask.

    Returns:
        :func:`dir_kind` of ``directory``, or ``checkpoint`` for a posenc checkpoint directory (an
        average written anywhere), else None.
    """
    kind = dir_kind(directory)
    if kind is None and directory.is_dir() and all((directory / n).is_file() for n in _CHECKPOINT_SIGNS):
        return "checkpoint"
    return kind


def posenc_owner(path: str | Path) -> tuple[Path, str] | None:
    """The posenc directory ``path`` lies in, if any.

    Args:
        path: a file or directory, existing or not.

    Returns:
        The nearest directory strictly above ``path`` (symlinks resolved) that posenc owns and its
        kind (:func:`owned_kind`), or None when no ancestor is posenc's.
    """
    for directory in Path(path).resolve().parents:
        kind = owned_kind(directory)
        if kind is not None:
            return directory, kind
    return None


def check_outside_posenc_dirs(path: str | Path, what: str) -> None:
    """Refuse (one-line RunDirError) an output file or directory ``path`` that lies, symlinks
    resolved, inside any posenc-owned directory (a run, prepared data, a report, logs, a
    model export, a checkpoint): it would overwrite posenc's own files (a tokenizer, a
    config, a model) or be mistaken for them. ``path`` itself is not judged (see :func:`check_target`).

    Args:
        path: the output file or directory.
        what: how the user named it, for the message (``--output``).

    Raises:
        RunDirError: ``path`` lies inside a posenc directory.
    """
    found = posenc_owner(path)
    if found is not None:
        directory, kind = found
        raise RunDirError(f"{what} {path} lies inside the posenc {KIND_WORDS[kind]} {directory}; "
                          "write it outside (posenc's directories hold only what posenc writes)")


def check_user_output(path: str | Path, what: str, inputs: tuple[str | Path, ...] = ()) -> None:
    """An output file the user named: :func:`posenc.files.check_output_file` (not a directory, not
    an input, its directory exists) and outside every posenc directory (:func:`check_outside_posenc_dirs`).

    Args:
        path: the output file.
        what: how the user named it, for the message (``--output``).
        inputs: the files the command reads, which ``path`` must not be.

    Raises:
        RunDirError: ``path`` is a directory or an input, its directory does not exist, or it lies
            inside a posenc directory.
    """
    check_output_file(path, what, inputs)
    check_outside_posenc_dirs(path, what)


def check_average_output(out: str | Path) -> None:
    """``posenc average --output``: a new or empty directory, or an earlier average (its
    ``state.json`` says ``"kind": "average"``) holding only the files of a checkpoint
    (``training.checkpoint.CHECKPOINT_FILES``, which the new average replaces); anything else is a one-line
    RunDirError.

    Args:
        out: the directory ``posenc average`` is to write.

    Raises:
        RunDirError: ``out`` is anything else.
    """
    out = Path(out)
    if _forbidden(out) is not None or (out.exists() and not out.is_dir()) or out.is_symlink():
        raise RunDirError(f"--output {out} exists and is not a directory of averaged weights; "
                          "give a new directory (or an earlier average's output)")
    if not out.exists() or not any(out.iterdir()):
        return
    try:
        kind = json.loads((out / "state.json").read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind != "average":
        raise RunDirError(f"--output {out} is not empty and not an earlier average's output; posenc would "
                          "replace it: give a new directory (or an earlier average's output)")
    foreign = os_call(lambda: foreign_files(out), out)
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise RunDirError(f"--output {out} is an earlier average but also holds files posenc did not write "
                          f"({foreign[0]!r}{more}); move them away or give a new directory")


def check_free_target(directory: str | Path, kind: str, what: str = "out_dir") -> None:
    """:func:`check_target`, except that a directory another posenc process
    holds (its lock) is reported as in use: what it is writing there (``.data.*``) is not a user's file.

    Args:
        directory: the directory about to be written.
        kind: what posenc writes there, a key of :data:`KIND_WORDS`.
        what: how the user named it, for the message.

    Raises:
        ConfigError: another posenc process holds ``directory``'s lock and :func:`check_target` refuses it.
        RunDirError: :func:`check_target` refuses ``directory`` and no posenc process holds it.
    """
    try:
        check_target(directory, kind, what)
    except RunDirError:
        pid = in_use(directory)
        if pid is not None:
            raise ConfigError(f"{directory} is in use by another posenc process (pid {pid or '?'}); "
                              "wait for it to finish or use another out_dir") from None
        raise
