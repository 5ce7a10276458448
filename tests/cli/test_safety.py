"""posenc never destroys what it did not write, never returns stale or mixed results, and fails
on a bad run directory with one line (exit 2) and nothing written.

Tests: 1 ``average --output`` → ``test_average_output_*``; 2 train into a foreign
out_dir → ``test_train_refuses_*``, ``test_no_resume_deletes_only_posenc_files``,
``test_older_run_without_marker_is_refused_until_upgraded``; 3 ``prepare --out EXISTING`` →
``test_prepare_refuses_a_foreign_directory``; 4 lock symlink → ``test_lock_that_is_*``;
5 ``--input - --output F`` → ``test_translate_stdin_to_output_file``; 6 foreign checkpoint →
``test_foreign_checkpoint_in_a_run_*``; tracebacks → the tests after them.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.files import snapshot
from tests.helpers.tiny import NEAR_INIT, TINY, TOY, assert_one_line_error, cli, hidden_leftovers, read, run_overrides


def foreign_dir(root: Path) -> Path:
    """A user's directory that happens to use the names of a run's outputs."""
    root.mkdir(parents=True)
    for name in ("checkpoints", "translations", "tensorboard", "data", "sub"):
        (root / name).mkdir()
        (root / name / "mine.txt").write_text(f"{name}: precious\n")
    for name in ("results.json", "config.yaml", "summary.json", "train.csv", "spm.model", "thesis.tex"):
        (root / name).write_text(f"{name}: precious\n")
    return root


# ------------------------------------------------------------------------------ finding 1: average --output

@pytest.mark.parametrize("case", ["user dir", "the run", "its checkpoints", "a checkpoint", "a file"])
def test_average_output_never_replaces_what_is_not_an_average(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               run_copy: Path, case: str) -> None:
    target = {"user dir": foreign_dir(tmp_path / "v"), "the run": run_copy, "its checkpoints": run_copy / "checkpoints",
              "a checkpoint": run_copy / "checkpoints" / "ckpt_00000003", "a file": tmp_path / "v.txt"}[case]
    if case == "a file":
        target.write_text("precious\n")
    before_run, before_tmp = snapshot(run_copy), snapshot(tmp_path)
    code, out, err = cli(capsys, "average", "--run", run_copy, "--last", "1", "--output", target)
    assert_one_line_error(code, err, str(target), "--output")
    assert out == "" and snapshot(run_copy) == before_run and snapshot(tmp_path) == before_tmp


def test_average_output_new_or_an_earlier_average(capsys: pytest.CaptureFixture[str], tmp_path: Path, run_copy: Path) -> None:
    out = tmp_path / "avg"
    assert cli(capsys, "average", "--run", run_copy, "--last", "2", "--output", out)[0] == 0
    code, _, err = cli(capsys, "average", "--run", run_copy, "--last", "3", "--output", out)  # replaces its own output
    assert code == 0, err
    assert json.loads((out / "state.json").read_text())["averaged_from"] == ["ckpt_00000001", "ckpt_00000002", "ckpt_00000003"]
    (tmp_path / "empty").mkdir()
    assert cli(capsys, "average", "--run", run_copy, "--last", "1", "--output", tmp_path / "empty")[0] == 0


# ------------------------------------------------------------------------------ finding 2: train into a foreign out_dir

@pytest.mark.parametrize("flags", [[], ["--no-resume"]])
def test_train_refuses_a_directory_posenc_did_not_write(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        flags: list[str]) -> None:
    d = foreign_dir(tmp_path / "d")
    before = snapshot(d)
    code, out, err = cli(capsys, "train", *flags, *run_overrides(d))
    assert_one_line_error(code, err, str(d), "posenc did not write")
    assert out == "" and snapshot(d) == before


def test_train_refuses_an_unrelated_data_dir(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = tmp_path / "d"
    (d / "data").mkdir(parents=True)
    (d / "data" / "corpus.txt").write_text("mine\n")
    before = snapshot(d)
    for flags in ([], ["--no-resume"]):
        code, _, err = cli(capsys, "train", *flags, *run_overrides(d))
        assert_one_line_error(code, err, str(d), "'data'")
        assert snapshot(d) == before


def test_train_refuses_root_and_home(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = cli(capsys, "train", *run_overrides(Path("/")))
    assert_one_line_error(code, err, "filesystem root")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    code, _, err = cli(capsys, "train", *run_overrides(home))
    assert_one_line_error(code, err, "home directory")
    assert list(home.iterdir()) == []


def test_run_dir_is_marked_and_no_resume_deletes_only_posenc_files(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path, prepared: Path) -> None:
    run = tmp_path / "run"
    assert cli(capsys, "train", *run_overrides(run, prepared))[0] == 0
    assert json.loads((run / ".posenc-run").read_text())["kind"] == "run"
    (run / "notes.txt").write_text("mine\n")
    (run / "checkpoints" / "notes.txt").write_text("mine\n")
    code, _, err = cli(capsys, "train", "--no-resume", *run_overrides(run, prepared, "model.d_ff=48"))
    assert code == 0, err
    assert (run / "notes.txt").read_text() == "mine\n" and (run / "checkpoints" / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["ckpt_00000003", "notes.txt"]


def test_older_run_without_marker_is_refused_until_upgraded(capsys: pytest.CaptureFixture[str], run_copy: Path,
                                                             prepared: Path) -> None:
    """A run of an older posenc (no marker) is not written: one line names ``posenc upgrade``; once
    upgraded (marked) it resumes."""
    (run_copy / ".posenc-run").unlink()
    extra = [*NEAR_INIT, "train.save_every=1", "train.keep_last=0", "model.position.name=ape", "train.max_steps=4"]
    before = snapshot(run_copy)
    code, _, err = cli(capsys, "train", *run_overrides(run_copy, prepared, *extra))
    assert_one_line_error(code, err, str(run_copy), "posenc did not write", f"`posenc upgrade {run_copy}`")
    assert snapshot(run_copy) == before
    assert cli(capsys, "upgrade", str(run_copy))[0] == 0
    assert json.loads((run_copy / ".posenc-run").read_text())["kind"] == "run"
    code, out, err = cli(capsys, "train", *run_overrides(run_copy, prepared, *extra))
    assert code == 0 and json.loads(out)["steps"] == 4, err


# ------------------------------------------------------------------------------ finding 3: prepare --out EXISTING

@pytest.mark.parametrize("flags", [[], ["--no-resume"]])
def test_prepare_refuses_a_foreign_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str]) -> None:
    d = foreign_dir(tmp_path / "d")
    before = snapshot(tmp_path)
    code, _, err = cli(capsys, "prepare", *flags, "--out", d, f"out_dir={tmp_path / 'run'}", *TOY, *TINY)
    assert_one_line_error(code, err, str(d))
    assert snapshot(tmp_path) == before


def test_prepare_no_resume_keeps_files_it_did_not_write(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = tmp_path / "data"
    argv = ["prepare", "--out", d, f"out_dir={tmp_path / 'run'}", *TOY, *TINY]
    assert cli(capsys, *argv)[0] == 0
    (d / "notes.txt").write_text("mine\n")
    code, _, err = cli(capsys, *argv[:1], "--no-resume", *argv[1:], "data.options.n_train=30")
    assert_one_line_error(code, err, "notes.txt")
    assert (d / "notes.txt").read_text() == "mine\n" and len(read(d / "train.src")) == 60


# ------------------------------------------------------------------------------ finding 4 + lock traceback

def test_lock_that_is_a_symlink_is_not_followed(capsys: pytest.CaptureFixture[str], tmp_path: Path, run_copy: Path,
                                                prepared: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run_copy / ".posenc.lock").symlink_to(victim)
    before = snapshot(run_copy)
    code, _, err = cli(capsys, "train", *run_overrides(run_copy, prepared, *NEAR_INIT, "train.max_steps=4"))
    assert_one_line_error(code, err, ".posenc.lock", "symlink")
    assert victim.read_text() == "precious\n" and snapshot(run_copy) == before


def test_lock_that_is_a_directory(capsys: pytest.CaptureFixture[str], run_copy: Path, prepared: Path) -> None:
    (run_copy / ".posenc.lock").mkdir()
    before = snapshot(run_copy)
    code, _, err = cli(capsys, "train", *run_overrides(run_copy, prepared, *NEAR_INIT, "train.max_steps=4"))
    assert_one_line_error(code, err, ".posenc.lock", "not a regular file")
    assert snapshot(run_copy) == before


# ------------------------------------------------------------------------------ finding 5: --input - --output F

def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_translate_stdin_to_output_file(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path, trained: Path, prepared: Path) -> None:
    expected_file = tmp_path / "expected.txt"
    assert cli(capsys, "translate", "--run", trained, "--input", prepared / "test.src", "--output", expected_file)[0] == 0
    out = tmp_path / "out.txt"
    out.write_text("stale\n")
    _stdin(monkeypatch, (prepared / "test.src").read_bytes())
    code, stdout, err = cli(capsys, "translate", "--run", trained, "--input", "-", "--output", out)
    assert code == 0, err
    assert stdout == "" and read(out) == read(expected_file) and "stale" not in read(out)


def test_invalid_utf8_on_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                               trained: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    for output in ([], ["--output", out]):
        _stdin(monkeypatch, b"ka lo\nmi \xff nu\n")
        code, _, err = cli(capsys, "translate", "--run", trained, "--input", "-", *output)
        assert_one_line_error(code, err, "<stdin>", "line 2", "UTF-8")
    assert out.read_text() == "old\n" and hidden_leftovers(tmp_path) == []


# ------------------------------------------------------------------------------ finding 6: foreign checkpoints

@pytest.fixture(scope="module")
def shape_run(tmp_path_factory: pytest.TempPathFactory, prepared: Path) -> Path:
    """A run of another model with the same parameter shapes as ``trained`` (SHAPE vs APE)."""
    from posenc.cli.main import main

    run = tmp_path_factory.mktemp("shape") / "run"
    extra = [*NEAR_INIT, "model.position.name=shape", "model.position.max_shift=20"]
    assert main(["train", *run_overrides(run, prepared, *extra)]) == 0
    return run


def _plant(run: Path, other: Path) -> Path:
    planted = run / "checkpoints" / "ckpt_00000009"
    shutil.copytree(sorted((other / "checkpoints").glob("ckpt_*"))[-1], planted)
    return planted


def test_foreign_checkpoint_in_a_run_is_not_used_by_translate(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              run_copy: Path, shape_run: Path, prepared: Path) -> None:
    planted = _plant(run_copy, shape_run)
    out = tmp_path / "out.txt"
    code, _, err = cli(capsys, "translate", "--run", run_copy, "--input", prepared / "test.src", "--output", out)
    assert_one_line_error(code, err, str(planted), "model.position.name")
    assert not out.exists()
    scores = run_copy / "translations" / "test.beam2.lp0.6.json"  # the copied run may hold an earlier one
    before = scores.read_bytes() if scores.exists() else None
    code, _, err = cli(capsys, "translate", "--run", run_copy, "--split", "test", "--data", prepared)
    assert_one_line_error(code, err, "another model")
    assert (scores.read_bytes() if scores.exists() else None) == before


def test_foreign_checkpoint_in_a_run_is_not_averaged(capsys: pytest.CaptureFixture[str], run_copy: Path,
                                                     shape_run: Path) -> None:
    _plant(run_copy, shape_run)
    before = snapshot(run_copy)
    code, _, err = cli(capsys, "average", "--run", run_copy, "--last", "2")
    assert_one_line_error(code, err, "ckpt_00000009", "another model")
    assert snapshot(run_copy) == before


def test_foreign_vocabulary_in_translate(capsys: pytest.CaptureFixture[str], tmp_path: Path, run_copy: Path,
                                         prepared: Path) -> None:
    other = tmp_path / "other"
    assert cli(capsys, "prepare", "--out", other, f"out_dir={tmp_path}", *TOY, *TINY, "data.vocab_size=60")[0] == 0
    shutil.copyfile(other / "spm.model", run_copy / "spm.model")  # a run's spm.model replaced by another's
    out = tmp_path / "out.txt"
    code, _, err = cli(capsys, "translate", "--run", run_copy, "--input", other / "train.src", "--output", out)
    assert_one_line_error(code, err, "spm.model", "60 pieces", "vocabulary of 40")
    assert not out.exists()


# ------------------------------------------------------------------------------ tracebacks → one line

def test_invalid_fingerprint_json(capsys: pytest.CaptureFixture[str], tmp_path: Path, run_copy: Path,
                                  prepared: Path) -> None:
    (run_copy / "fingerprint.json").write_text("{not json")
    before = snapshot(run_copy)
    code, _, err = cli(capsys, "train", *run_overrides(run_copy, prepared, *NEAR_INIT, "model.position.name=ape"))
    assert_one_line_error(code, err, "fingerprint.json", "not valid JSON")
    code, _, err = cli(capsys, "translate", "--run", run_copy, "--input", prepared / "test.src", "--output", tmp_path / "o")
    assert_one_line_error(code, err, "fingerprint.json", "not valid JSON")
    assert snapshot(run_copy) == before and not (tmp_path / "o").exists()


def test_invalid_data_fingerprint_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = tmp_path / "data"
    argv = ["prepare", "--out", d, f"out_dir={tmp_path / 'run'}", *TOY, *TINY]
    assert cli(capsys, *argv)[0] == 0
    (d / "fingerprint.json").write_text("[1, 2")
    code, _, err = cli(capsys, *argv)
    assert_one_line_error(code, err, "fingerprint.json", "not valid JSON")


@pytest.mark.parametrize("failure", ["ENOSPC", "EFBIG", "safetensors"])
def test_checkpoint_write_failure_keeps_the_old_checkpoint(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                           run_copy: Path, prepared: Path, failure: str) -> None:
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    import posenc.training.checkpoint as ck

    def failing_save(tensors: Any, filename: str, metadata: Any = None) -> None:
        save_file(tensors, filename, metadata=metadata)
        with open(filename, "r+b") as fh:
            fh.truncate(10)  # half written, then the disk is full
        if failure == "safetensors":
            raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })")
        raise OSError(getattr(errno, failure), os.strerror(getattr(errno, failure)), filename)

    monkeypatch.setattr(ck, "save_file", failing_save)
    before = snapshot(run_copy / "checkpoints")
    extra = [*NEAR_INIT, "train.save_every=1", "train.keep_last=0", "model.position.name=ape", "train.max_steps=4"]
    code, _, err = cli(capsys, "train", *run_overrides(run_copy, prepared, *extra))
    assert_one_line_error(code, err, "ckpt_00000004", "cannot write the checkpoint")
    assert snapshot(run_copy / "checkpoints") == before  # ckpt_00000003 intact, no leftovers


def read_only(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Make ``root`` behave as a read-only directory (the tests run as root, so chmod would not
    stop them): creating, opening for writing, renaming or removing anything inside it raises
    PermissionError, as the kernel does."""
    base = root.resolve()

    def inside(path: Any) -> bool:
        return isinstance(path, (str, os.PathLike)) and Path(os.path.abspath(os.fspath(path))).is_relative_to(base)

    def deny(path: Any) -> None:
        if inside(path):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))

    def guard(real: Any, writes: Any) -> Any:
        def wrapped(path: Any, *args: Any, **kwargs: Any) -> Any:
            if writes(*args, **kwargs):
                deny(path)
            return real(path, *args, **kwargs)
        return wrapped

    writing_mode = lambda mode="r", *a, **k: any(c in mode for c in "wax+")  # noqa: E731
    writing_flags = lambda flags, *a, **k: bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))  # noqa: E731
    always = lambda *a, **k: True  # noqa: E731
    monkeypatch.setattr(builtins, "open", guard(builtins.open, writing_mode))
    monkeypatch.setattr(io, "open", guard(io.open, writing_mode))
    monkeypatch.setattr(os, "open", guard(os.open, writing_flags))
    for name in ("mkdir", "unlink", "rmdir", "replace", "rename"):
        monkeypatch.setattr(os, name, guard(getattr(os, name), always))


def test_train_into_a_read_only_run_dir(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                        run_copy: Path, prepared: Path) -> None:
    before = snapshot(run_copy)
    read_only(monkeypatch, run_copy)
    code, _, err = cli(capsys, "train", *run_overrides(run_copy, prepared, *NEAR_INIT, "train.max_steps=4"))
    assert_one_line_error(code, err, str(run_copy), "Permission denied")
    monkeypatch.undo()
    assert snapshot(run_copy) == before


def test_translate_split_in_a_read_only_run_dir(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                run_copy: Path, prepared: Path) -> None:
    shutil.rmtree(run_copy / "translations", ignore_errors=True)
    before = snapshot(run_copy)
    read_only(monkeypatch, run_copy)
    code, _, err = cli(capsys, "translate", "--run", run_copy, "--split", "test", "--data", prepared)
    assert_one_line_error(code, err, f"{run_copy}/.posenc.lock: Permission denied")  # the run's lock comes first
    monkeypatch.undo()
    assert snapshot(run_copy) == before


def test_average_in_a_read_only_run_dir(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                        run_copy: Path) -> None:
    before = snapshot(run_copy)
    read_only(monkeypatch, run_copy)
    code, _, err = cli(capsys, "average", "--run", run_copy, "--last", "2")
    assert_one_line_error(code, err, f"{run_copy}/.posenc.lock: Permission denied")  # the run's lock comes first
    monkeypatch.undo()
    assert snapshot(run_copy) == before


def test_translate_output_or_input_is_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path,
                                                  prepared: Path) -> None:
    d = foreign_dir(tmp_path / "d")
    before = snapshot(d)
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", prepared / "test.src", "--output", d)
    assert_one_line_error(code, err, str(d), "is a directory")
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", d, "--output", tmp_path / "out.txt")
    assert_one_line_error(code, err, str(d), "is a directory")
    assert "no such file" not in err
    assert snapshot(d) == before and not (tmp_path / "out.txt").exists()


def test_input_directory_is_named_as_such() -> None:
    from posenc.decoding.translate import read_lines_lazily
    from posenc.errors import DataError

    with pytest.raises(DataError, match="is a directory") as info:
        list(read_lines_lazily(tempfile.gettempdir()))
    assert "no such file" not in str(info.value)


# ------------------------------------------------------------------------------ progress

def test_translate_output_reports_progress_without_a_terminal(capsys: pytest.CaptureFixture[str],
                                                               caplog: pytest.LogCaptureFixture,
                                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               trained: Path, prepared: Path) -> None:
    monkeypatch.setattr("posenc.cli.translate.PROGRESS_EVERY_S", 0.0)  # a line at every update
    with caplog.at_level(logging.INFO, logger="posenc"):
        code, _, err = cli(capsys, "translate", "--run", trained, "--input", prepared / "test.src",
                           "--output", tmp_path / "out.txt")
    assert code == 0, err
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("translated ")]
    n = len(read(prepared / "test.src"))
    assert lines and lines[-1].startswith(f"translated {n} lines (")


def test_progress_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc.cli import translate as cli_translate

    stream = io.StringIO()
    stream.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stderr", stream)
    progress = cli_translate.Progress()
    for lines in (2, 3):
        progress(lines)
    progress.close()
    assert "5 lines" in stream.getvalue()


SETPRIV = shutil.which("setpriv")


@pytest.mark.skipif(SETPRIV is None or os.geteuid() != 0, reason="needs root and setpriv to drop the override")
@pytest.mark.parametrize("command, needle", [
    (["train", "train.max_steps=4"], ".posenc.lock: Permission denied"),
    (["translate", "--split", "test", "--data", "{run}/data"], ".posenc.lock: Permission denied"),
    (["average", "--last", "2"], ".posenc.lock: Permission denied"),
    (["translate", "--input", "{run}/data/test.src", "--output", "{run}/out.txt"], "lies inside the posenc run"),
])
def test_really_read_only_run_dir(tmp_path: Path, prepared: Path, trained: Path, command: list[str], needle: str) -> None:
    """The same as the monkeypatched tests above, with the kernel's checks: a run directory
    without write permission and a root process without CAP_DAC_OVERRIDE (so chmod binds)."""
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    shutil.copytree(prepared, run / "data")
    shutil.rmtree(run / "translations", ignore_errors=True)
    for p in [run, *run.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    before = snapshot(run)
    args = [a.format(run=run) for a in command]
    where = run_overrides(run, None, *NEAR_INIT, "model.position.name=ape") if args[0] == "train" else ["--run", str(run)]
    argv = [args[0], *where, *args[1:]]
    drop = [SETPRIV, "--bounding-set", "-dac_override,-dac_read_search,-fowner"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        proc = subprocess.run([*drop, sys.executable, "-m", "posenc.cli.main", *map(str, argv)],
                              capture_output=True, text=True, env=env, timeout=300)
    finally:
        for p in [run, *run.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1 and needle in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and snapshot(run) == before


def test_progress_comes_per_batch_not_per_chunk(trained: Path, prepared: Path) -> None:
    """A long input reports progress while its first chunk (2,000 lines) is still decoding."""
    import torch

    from posenc.decoding.translate import translate_lines
    from posenc.tasks.translation.load import decode_options, load_run

    loaded = load_run(trained)
    sources = read(prepared / "test.src")
    calls: list[int] = []
    opts = {**decode_options(loaded.cfg.decode, loaded), "batch_tokens": 8}
    with torch.inference_mode():
        outputs = translate_lines(loaded.model, loaded.tokenizer, sources, on_decoded=calls.append, **opts)
        next(outputs)  # the first output line comes once its whole chunk is decoded
    assert len([c for c in calls if c]) > 1 and sum(calls) == len(sources)
