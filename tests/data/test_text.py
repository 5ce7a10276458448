"""Tests for posenc.data.text: strict UTF-8 reading, parallel files, atomic writing."""

from __future__ import annotations

import gzip
import io
import os
import tracemalloc
from pathlib import Path

import pytest

from posenc.data import text
from posenc.data.text import iter_lines, read_lines, read_parallel, write_lines_atomic
from posenc.errors import DataError


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize("name", ["a.txt", "a.txt.gz"])
def test_read_lines_strips_terminators(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path / name, "eins\r\nzwei ä\n\ndrei".encode())
    assert read_lines(path) == ["eins", "zwei ä", "", "drei"]


def test_read_lines_final_newline_empty_file_and_bom(tmp_path: Path) -> None:
    assert read_lines(_write(tmp_path / "a.txt", b"x\ny\n")) == ["x", "y"]
    assert read_lines(_write(tmp_path / "e.txt", b"")) == []
    assert read_lines(_write(tmp_path / "b.txt", b"\xef\xbb\xbfhi\n")) == ["hi"]
    assert read_lines(_write(tmp_path / "bom.txt", b"\xef\xbb\xbf")) == []  # only a BOM: no line
    assert read_lines(_write(tmp_path / "bom1.txt", b"\xef\xbb\xbf\n")) == [""]


def test_read_lines_splits_only_on_newline(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.txt", "a\u2028b\x0cc\nd\n".encode())
    assert read_lines(path) == ["a\u2028b\x0cc", "d"]


@pytest.mark.parametrize("name", ["train.de", "train.de.gz"])
def test_bad_utf8_names_file_and_line(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path / name, b"gut\nauch gut\nschl\xe4cht\n")
    with pytest.raises(DataError) as err:
        read_lines(path)
    assert str(err.value) == f"{path}: line 3: invalid UTF-8 byte 0xe4 at column 5"


@pytest.mark.parametrize("name", ["train.src", "train.src.gz"])
def test_a_nul_byte_names_file_line_and_column(tmp_path: Path, name: str) -> None:
    """A NUL byte is not text: refused where read, never kept in prepared data or dropped later."""
    path = _write(tmp_path / name, b"PE NU\nMI\x00LO KA\n")
    with pytest.raises(DataError) as err:
        read_lines(path)
    assert str(err.value) == f"{path}: line 2: NUL byte at column 3 (not text)"
    other = _write(tmp_path / "train.tgt", b"a\nb\n")
    with pytest.raises(DataError, match=r"train\.src(\.gz)?: line 2: NUL byte"):
        read_parallel(path, other)
    with pytest.raises(DataError, match="<stdin>: line 1: NUL byte at column 1"):
        list(iter_lines(io.BytesIO(b"\x00\n"), "<stdin>"))


def test_missing_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.txt: no such file"):
        read_lines(tmp_path / "nope.txt")
    bad = _write(tmp_path / "bad.txt", b"not gzip at all")
    bad_gz = bad.rename(tmp_path / "bad.gz")
    with pytest.raises(DataError, match=r"bad\.gz: corrupt gzip file"):
        read_lines(bad_gz)


def test_read_parallel_pairs(tmp_path: Path) -> None:
    src = _write(tmp_path / "s.en", b"a b\nc\n")
    tgt = _write(tmp_path / "t.de.gz", "A B\nC \u00e4\n".encode())
    assert read_parallel(src, tgt) == [("a b", "A B"), ("c", "C \u00e4")]


def test_read_parallel_count_mismatch(tmp_path: Path) -> None:
    src = _write(tmp_path / "s.en", b"a\nb\nc\n")
    tgt = _write(tmp_path / "t.de", b"A\nB\n")
    with pytest.raises(DataError) as err:
        read_parallel(src, tgt)
    assert str(err.value) == f"line counts differ: {src} has 3 lines, {tgt} has 2"


def test_read_parallel_empty_lines(tmp_path: Path) -> None:
    src = _write(tmp_path / "s.en", b"a\nb\nc\n")
    tgt = _write(tmp_path / "t.de", b"A\n \t \nC\n")
    with pytest.raises(DataError) as err:
        read_parallel(src, tgt)
    assert str(err.value) == f"{tgt}: line 2: empty line"
    src2 = _write(tmp_path / "s2.en", b"a\nb\n\n")
    with pytest.raises(DataError) as err:
        read_parallel(src2, tgt)
    assert str(err.value) == f"{tgt}: line 2: empty line"  # the earliest empty line wins
    with pytest.raises(DataError) as err:
        read_parallel(src2, _write(tmp_path / "t2.de", b"A\nB\nC\n"))
    assert str(err.value) == f"{src2}: line 3: empty line"


@pytest.mark.parametrize("name", ["out.txt", "out.txt.gz"])
def test_write_lines_atomic_round_trip(tmp_path: Path, name: str) -> None:
    path = tmp_path / "sub" / name
    write_lines_atomic(path, ["eins", "zwei ü", ""])
    assert read_lines(path) == ["eins", "zwei ü", ""]
    write_lines_atomic(path, (s for s in ["neu"]))
    assert read_lines(path) == ["neu"]
    assert sorted(os.listdir(path.parent)) == [name]  # no temp files left behind


def test_write_lines_atomic_never_half_writes(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("old\n")

    def lines():
        yield "first"
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        write_lines_atomic(path, lines())
    with pytest.raises(DataError, match=r"out\.txt: line 2: text contains a line break"):
        write_lines_atomic(path, ["ok", "bad\nline"])
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


# ------------------------------------------------------------------ bounded lines

class _CountingReader(io.BytesIO):
    """A BytesIO that records how many bytes were read from it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def readline(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        chunk = super().readline(size)
        self.bytes_read += len(chunk)
        return chunk


@pytest.mark.parametrize("name", ["one-line.txt", "one-line.txt.gz"])
def test_a_file_without_newlines_is_refused_with_bounded_memory(tmp_path: Path, name: str) -> None:
    size = 4 << 20  # 4 MiB, no newline: the whole file is one line
    path = _write(tmp_path / name, b"ok\n" + b"x" * size)
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as err:
            read_lines(path, max_line_bytes=1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(err.value).startswith(f"{path}: line 2: longer than 1024 bytes")
    assert "\n" not in str(err.value)
    assert peak < size // 8, f"peak {peak} bytes while refusing a {size}-byte line"


def test_an_over_long_line_is_refused_before_the_rest_is_read() -> None:
    stream = _CountingReader(b"a\nb\n" + b"y" * 100_000 + b"\nc\n")
    lines = iter_lines(stream, "in.txt", max_line_bytes=10)
    assert [next(lines), next(lines)] == ["a", "b"]
    with pytest.raises(DataError, match=r"^in\.txt: line 3: longer than 10 bytes"):
        next(lines)
    assert stream.bytes_read <= 4 + 12


def test_the_default_bound_is_read_at_call_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "a.txt", b"12345\n123456\n")
    assert read_lines(path) == ["12345", "123456"]
    monkeypatch.setattr(text, "MAX_LINE_BYTES", 5)
    with pytest.raises(DataError, match=r"a\.txt: line 2: longer than 5 bytes"):
        read_lines(path)


def test_a_line_of_exactly_the_bound_is_kept_whatever_its_terminator() -> None:
    data = b"12345\r\n12345\n12345"
    assert list(iter_lines(io.BytesIO(data), "x", max_line_bytes=5)) == ["12345"] * 3
    assert list(iter_lines(io.BytesIO(b"\xef\xbb\xbf12345\n"), "x", max_line_bytes=5)) == ["12345"]


def test_truncate_keeps_whole_characters_and_the_line_count() -> None:
    data = "ab\n" + "é" * 10 + "\n" + "z" * 50 + "\nc"
    with pytest.warns(UserWarning) as record:
        lines = list(iter_lines(io.BytesIO(data.encode()), "x", max_line_bytes=5, too_long="truncate"))
    assert lines == ["ab", "éé", "zzzzz", "c"]  # "é" is 2 bytes: the 5-byte cut would split the third
    messages = [str(w.message) for w in record]
    assert messages == ["x: line 2: longer than 5 bytes; truncated", "x: line 3: longer than 5 bytes; truncated"]
