"""Strict UTF-8 text I/O for line-aligned corpora (plain or gzip-compressed).

Lines are split on ``\\n`` only (a trailing ``\\r`` is removed too), never on other Unicode
line separators such as U+2028, so line numbers always agree with ``wc -l`` and with the
line alignment of a parallel corpus. A UTF-8 byte-order mark at the start of a file is dropped.
"""

from __future__ import annotations

import gzip
import os
import warnings
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from posenc.errors import DataError
from posenc.files import atomic_output

__all__ = ["MAX_LINE_BYTES", "iter_lines", "open_binary", "read_lines", "read_parallel", "write_lines_atomic"]

PathLike = str | os.PathLike[str]

_BOM = b"\xef\xbb\xbf"


#: Longest line, in bytes without its terminator, read from a user's text file (1 MiB). A file
#: without line breaks (a huge one-line file, ``/dev/zero``) is refused at this many bytes instead
#: of being read whole into memory. Read at call time, so it can be lowered (tests).
MAX_LINE_BYTES = 1 << 20
#: What to do with an over-long line: stop with its number, or keep its first MAX_LINE_BYTES bytes.
TOO_LONG = ("error", "truncate")


def open_binary(path: PathLike) -> BinaryIO:
    """Open ``path`` for reading bytes (gzip-decompressed when the name ends in ``.gz``).

    Raises:
        DataError: missing path, a directory, or unreadable (one line naming the file).
    """
    p = Path(path)
    try:
        return gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")
    except FileNotFoundError:
        raise DataError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{p}: is a directory, expected a text file") from None
    except OSError as err:
        raise DataError(f"{p}: cannot read ({err.strerror or err})") from None


def _utf8_prefix(raw: bytes, size: int) -> bytes:
    """The first ``size`` bytes of ``raw``, shortened so no UTF-8 character is cut in two."""
    end = size
    while 0 < end < len(raw) and size - end < 3 and raw[end] & 0xC0 == 0x80:  # a continuation byte
        end -= 1
    return raw[:end]


def _skip_rest_of_line(stream: BinaryIO, size: int) -> None:
    """Read (and drop) ``stream`` up to and including the next ``\\n``, ``size`` bytes at a time."""
    while True:
        chunk = stream.readline(size)
        if not chunk or chunk.endswith(b"\n"):
            return


def _decode(raw: bytes, name: str, number: int) -> str:
    """``raw`` as strict UTF-8; invalid bytes, and NUL bytes (no text holds one: a tokenizer or a
    downstream tool would keep or drop it silently), are a DataError naming the file, line and column."""
    if b"\0" in raw:
        raise DataError(f"{name}: line {number}: NUL byte at column {raw.index(0) + 1} (not text)")
    try:
        return raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{name}: line {number}: invalid UTF-8 byte 0x{raw[e.start]:02x} at column {e.start + 1}"
        ) from None


def iter_lines(stream: BinaryIO, name: str, max_line_bytes: int | None = None,
               too_long: str = "error") -> Iterator[str]:
    """Yield the lines of a binary stream as strict UTF-8, without terminators, one at a time.

    Lines end at ``\\n`` (a trailing ``\\r`` is removed too); a BOM at the start is dropped. At most
    ``max_line_bytes + 5`` bytes are read per call, so memory stays bounded whatever the input.

    Args:
        stream: an open binary stream (a file, a gzip file, ``sys.stdin.buffer``).
        name: the file name used in error messages.
        max_line_bytes: longest line in bytes (default :data:`MAX_LINE_BYTES`).
        too_long: ``"error"``: a longer line is a DataError naming ``name`` and its 1-based number;
            ``"truncate"``: it is cut to its first ``max_line_bytes`` bytes (whole characters), with
            a warning.

    Raises:
        DataError: an over-long line (``too_long="error"``), invalid UTF-8, a NUL byte, or a corrupt
            gzip stream.
    """
    limit = MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
    if too_long not in TOO_LONG:
        raise ValueError(f"too_long must be one of {TOO_LONG}, got {too_long!r}")
    number = 0
    try:
        while chunk := stream.readline(limit + 2 + (len(_BOM) if number == 0 else 0)):
            number += 1
            raw = chunk[:-1] if chunk.endswith(b"\n") else chunk
            raw = raw[:-1] if raw.endswith(b"\r") else raw
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
                if not raw and chunk == _BOM:  # a file holding only the BOM has no lines
                    return
            if len(raw) > limit:
                raw = _over_long(stream, raw, chunk, name, number, limit, too_long)
            yield _decode(raw, name, number)
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise DataError(f"{name}: corrupt gzip file ({e})") from None


def _over_long(stream: BinaryIO, raw: bytes, chunk: bytes, name: str, number: int, limit: int,
               too_long: str) -> bytes:
    """An over-long line: a DataError, or (``truncate``) its first ``limit`` bytes with a warning."""
    msg = f"{name}: line {number}: longer than {limit} bytes"
    if too_long == "error":
        raise DataError(f"{msg} (the limit for one line; is this a text file with one sentence per line?)")
    warnings.warn(f"{msg}; truncated", stacklevel=3)
    if not chunk.endswith(b"\n"):
        _skip_rest_of_line(stream, limit + 2)
    return _utf8_prefix(raw, limit)


def read_lines(path: PathLike, max_line_bytes: int | None = None) -> list[str]:
    """Read a text file strictly as UTF-8 and return its lines without line terminators.

    Args:
        path: a plain text file, or a gzip file when the name ends in ``.gz``.
        max_line_bytes: longest line in bytes (default :data:`MAX_LINE_BYTES`).

    Returns:
        list of N strings, one per line (a final line without ``\\n`` counts as a line;
        an empty file gives ``[]``).

    Raises:
        DataError: missing/corrupt file, a line over ``max_line_bytes`` or bytes that are not valid
            UTF-8 (message names the file and the 1-based line).
    """
    with open_binary(path) as f:
        return list(iter_lines(f, str(path), max_line_bytes))


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
