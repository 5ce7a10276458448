"""Atomic file output, one-line errors for failed writes and a file's sha256.

Write through a temporary file next to the target and rename it over the target only when
everything was written, so a failure (disk full, Ctrl-C, a bad input line) leaves the old file
intact and no partial file behind; an OSError becomes a one-line RunDirError.

An output the user names (``translate --output``, a benchmark's ``--out``) that is a symlink is
written through (``follow_symlink``): its final target is replaced and the user's link stays. posenc's
own files are written with the link itself replaced, so a link planted in a run directory (which
posenc does not trust) never redirects a write to a file outside it."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from posenc.errors import RunDirError


def sha256_of(path: str | os.PathLike[str]) -> str:
    """The hex sha256 digest of the file at ``path``, read in 4 MiB blocks (checkpoints and
    exports record it beside the file's size, each under its own key names)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_dir_mode() -> int:
    """Permission bits of a directory posenc creates: ``0o777`` less the umask (as ``mkdir``)."""
    return 0o777 & ~umask()


def replacement_mode(path: str | os.PathLike[str]) -> int:
    """Permission bits for a file written at ``path``: those of the file it replaces (a symlink's
    target), else ``0o666`` less the umask, as ``open(path, "w")`` would create it."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode) & 0o777
    except OSError:
        return 0o666 & ~umask()


@contextmanager
def atomic_output(path: str | os.PathLike[str], binary: bool = False, mode: int | None = None,
                  follow_symlink: bool = False) -> Iterator[IO]:
    """Yield a file object for ``path``'s replacement; on a clean exit it is flushed, fsynced and
    renamed over ``path``, on any exception removed. Its permission bits are ``mode``, by default
    :func:`replacement_mode` (the replaced file's, else the umask's). ``follow_symlink``: a ``path``
    that is a symlink (or a chain of them) is written through: the temporary file goes beside the
    final target and is renamed over it, the links stay; otherwise the link itself is replaced.
    OSError from creating it propagates."""
    target = Path(os.path.realpath(path)) if follow_symlink else Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with naming_os_errors(path):  # a failed write (disk full, file too large) names the file
            opening = {"mode": "wb"} if binary else {"mode": "w", "encoding": "utf-8", "newline": "\n"}
            with os.fdopen(fd, **opening) as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, replacement_mode(target) if mode is None else mode)  # mkstemp made it 0600
            os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def naming_os_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Give an OSError raised inside that names no file (``write`` failing with EFBIG or ENOSPC)
    the file ``path`` being written, so its one-line message says which file it was. Any such
    filename-less OSError raised in the body is said of ``path``, whichever call raised it, so the
    body should write only ``path``. (:func:`posenc.config.naming` is another thing: it prefixes a
    ConfigError with the file its values came from.)"""
    try:
        yield
    except OSError as err:
        if err.filename is None:
            err.filename = os.fspath(path)
        raise


def atomic_write_text(path: str | Path, text: str, follow_symlink: bool = False) -> None:
    """Write ``path`` through a temporary file renamed over it: a failure leaves the old file
    (``follow_symlink``: as :func:`atomic_output`'s, for an output file the user named)."""
    atomic_write_bytes(path, text.encode("utf-8"), follow_symlink)


def atomic_write_bytes(path: str | Path, data: bytes, follow_symlink: bool = False) -> None:
    """Bytes version of :func:`atomic_write_text` (OSError becomes a one-line RunDirError)."""
    def write() -> None:
        with atomic_output(path, binary=True, follow_symlink=follow_symlink) as fh:
            fh.write(data)

    os_call(write, path)


def os_error_message(err: OSError, fallback: str | Path) -> str:
    """``FILE: reason`` for an OSError (permission denied, disk full, file too large, ...);
    ``FILE -> FILE2: reason`` for one of two files (a copy, a rename); ``fallback`` names the file
    when the error does not."""
    reason = err.strerror or str(err) or type(err).__name__
    where = f"{err.filename} -> {err.filename2}" if err.filename and err.filename2 else err.filename
    return f"{where or fallback}: {reason}"


def os_call(fn: Any, where: str | Path) -> Any:
    """``fn()``, its OSError as a one-line RunDirError ``cannot write FILE: reason``."""
    try:
        return fn()
    except OSError as err:
        raise RunDirError(f"cannot write {os_error_message(err, where)}") from None


@contextmanager
def os_errors(writing: str) -> Iterator[None]:
    """Turn an OSError raised inside (permission denied, read-only or full disk) into one line
    naming its file; an error that names none (a write site not wrapped in :func:`naming_os_errors`) is
    said of ``writing``, what the command writes (``a file in DIR``, ``standard output``)."""
    try:
        yield
    except OSError as err:
        raise RunDirError(os_error_message(err, writing)) from None


def check_output_file(path: str | Path, what: str, inputs: tuple[str | Path, ...] = ()) -> None:
    """Refuse (one-line RunDirError) an output file name that is a directory, whose directory
    does not exist (no directories are created for it, as ``cp`` creates none), or that is one of
    ``inputs`` (the same file by inode, through links: it would be overwritten while read)."""
    p = Path(path)
    if p.is_dir():
        raise RunDirError(f"{what} {p} is a directory; give an output file name")
    parent = p.parent
    if not parent.is_dir():
        raise RunDirError(f"{what} {p}: directory {parent} does not exist (posenc creates no directory for an "
                          "output file: create it first)")
    for source in inputs:
        try:
            same = p.exists() and Path(source).exists() and os.path.samefile(p, source)
        except OSError:
            same = False
        if same:
            raise RunDirError(f"{what} {p} is the input file {source}; write the output to another file")
