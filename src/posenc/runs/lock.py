"""The exclusive lock of a posenc directory: one process writes a run (or an average into it, or
the outputs a user asks of it) at a time."""

from __future__ import annotations

import errno
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from posenc.errors import ConfigError, RunDirError
from posenc.files import os_call, os_error_message
from posenc.processes import pid_alive

log = logging.getLogger("posenc")

LOCK_NAME = ".posenc.lock"


def _holder(path: Path) -> int:
    try:
        return int(path.read_text(encoding="utf-8").strip() or 0)
    except (OSError, ValueError):
        return 0


#: What a command refused by a held lock can do, by default (a command that names an out_dir).
IN_USE_ADVICE = "wait for it to finish or use another out_dir"


def missing_directories(directory: Path) -> list[Path]:
    """What ``mkdir(parents=True)`` would create, so a failed command can remove just that.

    Args:
        directory: the directory about to be created.

    Returns:
        ``directory`` and those of its ancestors that do not exist (a dangling symlink counts as
        existing), deepest first; empty when ``directory`` exists.
    """
    missing = []
    for d in (directory, *directory.parents):
        if d.exists() or d.is_symlink():
            break
        missing.append(d)
    return missing


def remove_created(created: list[Path]) -> None:
    """Remove the directories of ``created`` that are still empty, deepest first (a parent after
    its children): a failed command leaves none of the directories it created, and touches no other.

    Args:
        created: the directories a command created (:func:`missing_directories` before it made
            them); one that is not empty or is gone is left as it is.
    """
    for d in sorted(created, key=lambda p: len(p.parts), reverse=True):
        try:
            d.rmdir()  # only if empty
        except OSError:
            pass


@contextmanager
def exclusive(directory: str | Path, lock_name: str = LOCK_NAME, advice: str = IN_USE_ADVICE) -> Iterator[Path]:
    """Hold an exclusive lock on ``directory`` (file ``directory/LOCK_NAME`` with our pid).

    The lock is an ``fcntl.flock`` on that file, so the kernel releases it when its process
    dies: a lock file left by a dead pid is taken over (and logged); one held by a live process
    is a one-line :class:`ConfigError` ending in ``advice``. On exit the lock file is removed, and
    so is every directory this call created (``directory`` and missing parents) that is still
    empty, so a failed command leaves no trace.

    Args:
        directory: the directory to lock; created (with its parents) if missing.
        lock_name: the lock file's name inside ``directory``.
        advice: what the refused user can do, the end of the message when a live process holds
            the lock.

    Yields:
        The lock file's path, while the lock is held.

    Raises:
        ConfigError: a live process holds the lock.
        RunDirError: ``directory`` cannot be created, or the lock file is a symlink, not a regular
            file, or cannot be opened.
    """
    import fcntl

    directory = Path(directory)
    created = missing_directories(directory)
    os_call(lambda: directory.mkdir(parents=True, exist_ok=True), directory)
    path = directory / lock_name
    while True:
        stale = _holder(path) if path.is_file() and not path.is_symlink() else 0
        fd = _open_lock(path, directory, created)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            remove_created(created)
            raise ConfigError(
                f"{directory} is in use by another posenc process (pid {_holder(path) or '?'}); {advice}"
            ) from None
        if path.exists() and os.fstat(fd).st_ino == os.stat(path).st_ino:
            break  # else the previous holder removed the file between our open and flock: retry
        os.close(fd)
    if stale and stale != os.getpid() and not pid_alive(stale):
        log.info("taking over the stale lock of dead process %d in %s", stale, directory)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        remove_created(created)


def in_use(directory: str | Path, lock_name: str = LOCK_NAME) -> int | None:
    """Whether a live posenc process holds ``directory``'s lock, asked without taking it.

    Args:
        directory: the locked (or not) directory.
        lock_name: the lock file's name inside ``directory``.

    Returns:
        The pid of the process holding the lock (0 if the lock file does not say), or ``None``
        when no process holds it or there is no lock file.
    """
    import fcntl

    path = Path(directory) / lock_name
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return _holder(path)
    finally:
        os.close(fd)  # also releases a shared lock we got
    return None


def _open_lock(path: Path, directory: Path, created: list[Path]) -> int:
    """Open (create) the lock file, never through a symlink and never a directory."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        remove_created(created)
        kind = "a symlink" if path.is_symlink() else "not a regular file"
        raise RunDirError(f"lock file {path} is {kind}; remove it if no posenc process is using {directory}")
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as err:
        remove_created(created)
        if err.errno in (errno.ELOOP, errno.EISDIR):
            raise RunDirError(f"lock file {path} is not a regular file; remove it if no posenc process "
                              f"is using {directory}") from None
        raise RunDirError(f"cannot lock {directory}: {os_error_message(err, path)}") from None
