"""File-tree fingerprints for tests that check a refused command changed nothing."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def md5s(directory: Path) -> dict[str, str | None]:
    """md5 of every file (a symlink: its target; a directory: None) under ``directory``."""
    out: dict[str, str | None] = {}
    for p in sorted(directory.rglob("*")):
        key = str(p.relative_to(directory))
        if p.is_symlink():
            out[key] = "-> " + os.readlink(p)
        else:
            out[key] = hashlib.md5(p.read_bytes()).hexdigest() if p.is_file() else None
    return out


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every file (bytes), symlink (its target) and directory (None) under ``directory``."""
    out: dict[str, bytes | None] = {}
    for p in sorted(directory.rglob("*")):
        key = str(p.relative_to(directory))
        out[key] = os.readlink(p).encode() if p.is_symlink() else (p.read_bytes() if p.is_file() else None)
    return out
