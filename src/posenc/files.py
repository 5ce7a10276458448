"""Atomic file output: write through a temporary file next to the target and rename it over the
target only when everything was written, so a failure (disk full, Ctrl-C, a bad input line)
leaves the old file intact and no partial file behind (issue 18)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_output(path: str | os.PathLike[str], binary: bool = False, mode: int = 0o644) -> Iterator[IO]:
    """Yield a file object for ``path``'s replacement; on a clean exit it is flushed, fsynced and
    renamed over ``path`` (permission bits ``mode``), on any exception removed. OSError from
    creating it propagates."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        opening = {"mode": "wb"} if binary else {"mode": "w", "encoding": "utf-8", "newline": "\n"}
        with os.fdopen(fd, **opening) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
