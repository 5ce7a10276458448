"""Strict UTF-8 text I/O for line-aligned corpora (plain or gzip-compressed).

Lines are split on ``\\n`` only (a trailing ``\\r`` is removed too), never on other Unicode
line separators such as U+2028, so line numbers always agree with ``wc -l`` and with the
line alignment of a parallel corpus. A UTF-8 byte-order mark at the start of a file is dropped.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

from posenc.errors import DataError
from posenc.files import atomic_output

__all__ = ["read_lines", "read_parallel", "write_lines_atomic"]

PathLike = str | os.PathLike[str]

_BOM = b"\xef\xbb\xbf"


def _read_bytes(path: PathLike) -> bytes:
    """Return the (decompressed, when the name ends in ``.gz``) content of ``path``."""
    p = Path(path)
    try:
        if p.suffix == ".gz":
            with gzip.open(p, "rb") as f:
                return f.read()
        return p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{p}: is a directory, expected a text file") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise DataError(f"{p}: corrupt gzip file ({e})") from None


def read_lines(path: PathLike) -> list[str]:
    """Read a text file strictly as UTF-8 and return its lines without line terminators.

    Args:
        path: a plain text file, or a gzip file when the name ends in ``.gz``.

    Returns:
        list of N strings, one per line (a final line without ``\\n`` counts as a line;
        an empty file gives ``[]``).

    Raises:
        DataError: missing/corrupt file, or bytes that are not valid UTF-8
            (message names the file and the 1-based line).
    """
    data = _read_bytes(path)
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    if not data:
        return []
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    lines: list[str] = []
    for number, raw in enumerate(raw_lines, start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            lines.append(raw.decode("utf-8", errors="strict"))
        except UnicodeDecodeError as e:
            raise DataError(
                f"{path}: line {number}: invalid UTF-8 byte 0x{raw[e.start]:02x} "
                f"at column {e.start + 1}"
            ) from None
    return lines


def _first_empty(lines: list[str]) -> int | None:
    """Return the 1-based number of the first whitespace-only line, or None."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            return number
    return None


def read_parallel(src_path: PathLike, tgt_path: PathLike) -> list[tuple[str, str]]:
    """Read two line-aligned files into a list of N (source, target) pairs.

    Raises:
        DataError: different line counts (naming both files and counts), or a
            whitespace-only line on either side (naming the file and 1-based line;
            the earliest such line wins, the source file first on a tie).
    """
    src = read_lines(src_path)
    tgt = read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(
            f"line counts differ: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
        )
    bad_src, bad_tgt = _first_empty(src), _first_empty(tgt)
    if bad_src is not None and (bad_tgt is None or bad_src <= bad_tgt):
        raise DataError(f"{src_path}: line {bad_src}: empty line")
    if bad_tgt is not None:
        raise DataError(f"{tgt_path}: line {bad_tgt}: empty line")
    return list(zip(src, tgt))


def _encode_lines(path: Path, lines: Iterable[str]) -> bytes:
    """Join ``lines`` with ``\\n`` terminators as UTF-8; gzip when the name ends in ``.gz``."""
    parts: list[str] = []
    for number, line in enumerate(lines, start=1):
        if "\n" in line or "\r" in line:
            raise DataError(f"{path}: line {number}: text contains a line break")
        parts.append(line + "\n")
    data = "".join(parts).encode("utf-8")
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    return data


def write_lines_atomic(path: PathLike, lines: Iterable[str]) -> None:
    """Write ``lines`` (one ``\\n``-terminated UTF-8 line each) to ``path`` atomically.

    The text goes to a temporary file in the same directory which is then renamed over
    ``path`` with :func:`os.replace`, so readers see either the old file or the complete
    new one, never a half-written file. Names ending in ``.gz`` are gzip-compressed.

    Raises:
        DataError: a line contains ``\\n`` or ``\\r`` (it would break line alignment);
            nothing is written then.
    """
    target = Path(path)
    data = _encode_lines(target, lines)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(target, binary=True) as f:  # the replaced file's mode, else the umask's
        f.write(data)
