"""A line over MAX_LINE_BYTES in any user text file (training data, translate input incl. stdin,
evaluate --hyp/--ref) is refused in one line naming the file and line, without reading the rest
of the file into memory; ``translate --too-long truncate`` cuts such a line instead."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from posenc.data import text
from tests.cli.test_files_corpus import files_overrides, write_corpus
from tests.helpers.tiny import TINY, assert_one_line_error, cli, hidden_leftovers, read

LIMIT = 4096
#: Bigger than the limit by far, small enough for a test (the issue's case was /dev/zero).
HUGE = 3 << 20


@pytest.fixture(autouse=True)
def _small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text, "MAX_LINE_BYTES", LIMIT)


def _append_one_huge_line(path: Path) -> None:
    """Append HUGE bytes with no newline to ``path`` (line N+1 of an N-line file)."""
    with path.open("ab") as fh:
        fh.write(b"a" * HUGE)


@pytest.mark.parametrize("command", ["prepare", "train"])
def test_training_data_with_a_huge_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str) -> None:
    files = write_corpus(tmp_path / "corpus")
    _append_one_huge_line(files["valid_tgt"])
    run = tmp_path / "run"
    code, out, err = cli(capsys, command, f"out_dir={run}", *files_overrides(files), *TINY)
    assert_one_line_error(code, err, f"{files['valid_tgt']}: line 7: longer than {LIMIT} bytes")
    assert out == "" and not run.exists() and hidden_leftovers(tmp_path) == []


@pytest.mark.parametrize("side", ["--hyp", "--ref"])
def test_evaluate_with_a_huge_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, side: str) -> None:
    files = {name: tmp_path / name for name in ("hyp.txt", "ref.txt")}
    for path in files.values():
        path.write_text("a b c\n", encoding="utf-8")
    bad = files["hyp.txt" if side == "--hyp" else "ref.txt"]
    _append_one_huge_line(bad)
    code, _, err = cli(capsys, "evaluate", "--hyp", files["hyp.txt"], "--ref", files["ref.txt"])
    assert_one_line_error(code, err, f"{bad}: line 2: longer than {LIMIT} bytes")


def test_translate_input_with_a_huge_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path,
                                          prepared: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes((prepared / "test.src").read_bytes())
    _append_one_huge_line(src)
    out = tmp_path / "out.txt"
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", out)
    assert_one_line_error(code, err, f"{src}: line {len(read(prepared / 'test.src')) + 1}: longer than {LIMIT} bytes")
    assert not out.exists() and hidden_leftovers(tmp_path) == []


def test_translate_stdin_with_a_huge_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                          trained: Path) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b"ka lo\n" + b"a" * HUGE), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", "-")
    assert_one_line_error(code, err, f"<stdin>: line 2: longer than {LIMIT} bytes")


def test_translate_too_long_truncate_cuts_a_huge_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      trained: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes(b"ka lo\n" + b"mi " * (HUGE // 3) + b"\nnu\n")
    out = tmp_path / "out.txt"
    with pytest.warns(UserWarning, match=rf"in\.txt: line 2: longer than {LIMIT} bytes; truncated"):
        code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", out,
                           "--too-long", "truncate")
    assert code == 0, err
    assert len(read(out)) == 3
