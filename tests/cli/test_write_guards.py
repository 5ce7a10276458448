"""Guards on what posenc writes: a run being trained is written by no other command, outputs stay
out of every directory posenc owns (an experiment's data and SentencePiece caches too), an OS
error names its file, a failed command removes only the directories it created, and a warning is
one line. Each refusal is one line (exit 2) with every file byte for byte unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cli.test_files_corpus import files_overrides, write_corpus
from tests.helpers.tiny import TINY, TOY, assert_one_line_error, cli


@pytest.fixture
def run_copy(tmp_path: Path, trained: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    return run


# ------------------------------------------------------------------------------ failures leave no directories

@pytest.mark.parametrize("command", ["prepare", "train"])
def test_a_failed_command_removes_the_directories_it_created(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             command: str) -> None:
    """``out_dir: existing/a/b/run`` with a missing source file: a/, a/b/ and run/ are removed,
    ``existing/`` (there before) stays."""
    files = write_corpus(tmp_path / "corpus")
    files["train_src"] = tmp_path / "corpus" / "missing.src"
    existing = tmp_path / "existing"
    existing.mkdir()
    code, _, err = cli(capsys, command, f"out_dir={existing / 'a' / 'b' / 'run'}", *files_overrides(files), *TINY)
    assert_one_line_error(code, err, "missing.src")
    assert existing.is_dir() and list(existing.iterdir()) == []


def test_prepare_out_failure_removes_the_directories_it_created(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    files = write_corpus(tmp_path / "corpus")
    files["valid_tgt"] = tmp_path / "corpus" / "missing.tgt"
    code, _, err = cli(capsys, "prepare", "--out", tmp_path / "a" / "b" / "data", f"out_dir={tmp_path / 'r'}",
                       *files_overrides(files), *TINY)
    assert_one_line_error(code, err, "missing.tgt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_a_prepare_that_succeeds_keeps_the_directories_it_created(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Only a failure removes them: ``prepare --out a/data`` keeps a/ and a/data/."""
    code, _, err = cli(capsys, "prepare", "--out", tmp_path / "a" / "data", f"out_dir={tmp_path / 'r'}", *TOY, *TINY)
    assert code == 0, err
    assert (tmp_path / "a" / "data" / "meta.json").is_file()


