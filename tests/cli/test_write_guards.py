"""Guards on what posenc writes: a run being trained is written by no other command, outputs stay
out of every directory posenc owns (an experiment's data and SentencePiece caches too), an OS
error names its file, a failed command removes only the directories it created, and a warning is
one line. Each refusal is one line (exit 2) with every file byte for byte unchanged."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.runs.lock import exclusive
from tests.cli.test_files_corpus import files_overrides, write_corpus
from tests.helpers.files import md5s
from tests.helpers.tiny import TINY, TOY, assert_one_line_error, cli, run_overrides

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


# ------------------------------------------------------------------------------ outputs inside posenc's data

def _experiment_data(tmp_path: Path) -> Path:
    """The data directory of a tiny experiment, prepared as ``posenc experiment`` prepares it
    (one prepared directory per setting and the SentencePiece cache beside them)."""
    from posenc.config import load_config
    from posenc.tasks.translation.experiment import ExperimentConfig, experiment_of
    from posenc.tasks.translation.task import TranslationTask
    from tests.experiments.tiny_grid import write_experiment

    exp = load_config(ExperimentConfig, write_experiment(tmp_path / "exp"))
    TranslationTask().prepare(experiment_of(exp), experiment_of(exp).cells())
    return exp.root / "data"


@pytest.mark.parametrize("target", ["x.txt", ".spm-cache/new.txt", ".spm-cache/sub/new.txt"])
def test_translate_output_inside_an_experiments_data_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                trained: Path, target: str) -> None:
    data = _experiment_data(tmp_path)
    (data / ".spm-cache" / "sub").mkdir()
    src = tmp_path / "in.txt"
    src.write_text("a b c\n")
    before = md5s(tmp_path)
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", data / target)
    assert_one_line_error(code, err, "--output", "lies inside the posenc")
    assert md5s(tmp_path) == before


def test_translate_output_inside_the_cache_of_prepare_out_is_refused(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path, trained: Path,
                                                                     prepared: Path) -> None:
    """``prepare --out DIR`` keeps its SentencePiece cache beside DIR (DIR/../.spm-cache)."""
    cache = prepared.parent / ".spm-cache"
    assert cache.is_dir()
    src = tmp_path / "in.txt"
    src.write_text("a b c\n")
    before = md5s(cache)
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", cache / "new.txt")
    assert_one_line_error(code, err, "--output", "lies inside the posenc", str(cache))
    assert md5s(cache) == before


def test_an_experiments_data_directory_is_its_own_kind(tmp_path: Path) -> None:
    """The experiment's data directory is posenc's, and no run or prepared data goes into it."""
    from posenc.errors import RunDirError
    from posenc.runs.ownership import check_target, dir_kind

    data = _experiment_data(tmp_path)
    assert dir_kind(data) == "datasets" and dir_kind(data / ".spm-cache") == "cache"
    for kind in ("run", "data"):
        with pytest.raises(RunDirError, match="holds a posenc"):
            check_target(data, kind)


# ------------------------------------------------------------------------------ OS errors name their file

def _file_size_limit(limit: int) -> None:
    """``ulimit -f``: this process may write no file over ``limit`` bytes (a child's ``preexec_fn``)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_a_file_too_large_names_the_file(tmp_path: Path) -> None:
    """A prepared split over the file size limit (``ulimit -f``): one line naming the split file.
    The limit lies between the SentencePiece model (about 240 kB) and the training split; it is set
    in the ``posenc prepare`` process only, so nothing else the test run writes meets it."""
    files = write_corpus(tmp_path / "corpus")
    for side in ("train_src", "train_tgt"):
        files[side].write_text(files[side].read_text() * 600)  # 24,000 pairs, over 500 kB a side
    assert files["train_src"].stat().st_size > 500_000
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "posenc.cli.main", "prepare", f"out_dir={run}", *files_overrides(files), *TINY]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                          preexec_fn=lambda: _file_size_limit(400_000))  # Python ignores SIGXFSZ: EFBIG
    message = assert_one_line_error(proc.returncode, proc.stderr, "File too large")
    assert message.split(": ")[0].endswith("train.src"), message
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] != 400_000  # the test process's own limit is untouched


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


# ------------------------------------------------------------------------------ warnings are one line

@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory, prepared: Path) -> Path:
    """A run whose sources hold at most 8 tokens (its outputs at most 19): decoding stays short."""
    from posenc.cli.main import main

    run = tmp_path_factory.mktemp("short") / "run"
    assert main(["train", *run_overrides(run, prepared, "data.max_source_len=8")]) == 0
    return run


def test_a_truncation_warning_is_one_line(tmp_path: Path, short_run: Path) -> None:
    """``--too-long truncate``: ``warning: <message>`` on stderr, no source path or code line."""
    src = tmp_path / "in.txt"
    src.write_text("ka lo\n" + " ".join(["ka lo mi"] * 10) + "\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "posenc.cli.main", "translate", "--run", str(short_run), "--input",
                           str(src), "--output", str(tmp_path / "out.txt"), "--too-long", "truncate"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "truncated" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: input line 2: "), proc.stderr
    assert "UserWarning" not in proc.stderr and ".py:" not in proc.stderr and "warnings.warn" not in proc.stderr
