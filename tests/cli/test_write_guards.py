"""Guards on what posenc writes: a run being trained is written by no other command, outputs stay
out of every directory posenc owns (an experiment's data and SentencePiece caches too), an OS
error names its file, a failed command removes only the directories it created, and a warning is
one line. Each refusal is one line (exit 2) with every file byte for byte unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from posenc.runs.rundir import exclusive
from tests.cli.test_files_corpus import files_overrides, write_corpus
from tests.cli.test_safety_round2 import md5s
from tests.helpers.tiny import TINY, TOY, assert_one_line_error, cli


@pytest.fixture
def run_copy(tmp_path: Path, trained: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    return run


# ------------------------------------------------------------------------------ the run's lock

@pytest.mark.parametrize("command", [("average", "--last", "2"), ("translate", "--split", "test")])
def test_commands_writing_into_a_run_being_trained_are_refused(capsys: pytest.CaptureFixture[str],
                                                               run_copy: Path, command: tuple[str, ...]) -> None:
    """``average`` (into RUN/checkpoints/average) and ``translate --split`` (into RUN/translations)
    while ``posenc train`` holds the run's lock (taken here as train takes it)."""
    with exclusive(run_copy):
        before = md5s(run_copy)
        code, out, err = cli(capsys, command[0], "--run", run_copy, *command[1:])
        assert_one_line_error(code, err, str(run_copy), "in use by another posenc process")
        assert out == "" and md5s(run_copy) == before


def test_average_into_a_free_run_still_works_and_leaves_no_lock(capsys: pytest.CaptureFixture[str],
                                                                run_copy: Path) -> None:
    code, _, err = cli(capsys, "average", "--run", run_copy, "--last", "2")
    assert code == 0, err
    assert (run_copy / "checkpoints" / "average" / "model.safetensors").is_file()
    assert not (run_copy / ".posenc.lock").exists()


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


