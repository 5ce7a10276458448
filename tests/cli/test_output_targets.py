"""Output targets a command is given: each one that would lose a user's data is refused in one
line (exit 2) with the user's files byte for byte unchanged.

``average --output`` into an earlier average holding user files (``test_average_*``);
``translate --output`` the input, a run's file or under a missing directory
(``test_translate_output_*``); ``prepare --out`` a symlink, and the prepared data's modes
(``test_prepare_*symlink*``, ``test_prepared_data_follows_the_umask``); ``--no-resume`` and pruning
with a user's file in a checkpoint (``test_no_resume_*``, ``test_pruning_*``); benchmark outputs, a
directory being prepared and budgets no pair can meet (the tests after them).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.files import md5s
from tests.helpers.tiny import NEAR_INIT, TINY, TOY, assert_one_line_error, cli, run_overrides

# ------------------------------------------------------------------------------ 1: average into an average

@pytest.mark.parametrize("where", ["mynote.txt", "sub/f"])
def test_average_into_an_earlier_average_with_user_files_is_refused(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path, run_copy: Path, where: str) -> None:
    out = tmp_path / "av_100"
    assert cli(capsys, "average", "--run", run_copy, "--last", "2", "--output", out)[0] == 0
    (out / where).parent.mkdir(exist_ok=True)
    (out / where).write_text("precious\n")
    before = md5s(tmp_path)
    code, _, err = cli(capsys, "average", "--run", run_copy, "--last", "3", "--output", out)
    assert_one_line_error(code, err, str(out), where.split("/")[0], "posenc did not write")
    assert md5s(tmp_path) == before


def test_average_into_the_default_average_with_a_user_file_is_refused(capsys: pytest.CaptureFixture[str],
                                                                     run_copy: Path) -> None:
    assert cli(capsys, "average", "--run", run_copy, "--last", "2")[0] == 0
    (run_copy / "checkpoints" / "average" / "readme.md").write_text("mine\n")
    before = md5s(run_copy)
    code, _, err = cli(capsys, "average", "--run", run_copy, "--last", "3")
    assert_one_line_error(code, err, "readme.md")
    assert md5s(run_copy) == before


def test_average_replaces_its_own_earlier_average(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  run_copy: Path) -> None:
    out = tmp_path / "avg"
    assert cli(capsys, "average", "--run", run_copy, "--last", "2", "--output", out)[0] == 0
    assert cli(capsys, "average", "--run", run_copy, "--last", "3", "--output", out)[0] == 0
    assert json.loads((out / "state.json").read_text())["averaged_from"] == [f"ckpt_0000000{i}" for i in (1, 2, 3)]


# ------------------------------------------------------------------------------ 5: --no-resume and checkpoints

def test_no_resume_never_deletes_a_user_file_inside_a_checkpoint(capsys: pytest.CaptureFixture[str], run_copy: Path,
                                                                 prepared: Path) -> None:
    (run_copy / "checkpoints" / "ckpt_00000002" / "mine.txt").write_text("precious\n")
    before = md5s(run_copy)
    extra = [*NEAR_INIT, "train.save_every=1", "train.keep_last=0", "model.position.name=ape"]
    code, _, err = cli(capsys, "train", "--no-resume", *run_overrides(run_copy, prepared, *extra))
    assert_one_line_error(code, err, "ckpt_00000002", "mine.txt")
    assert md5s(run_copy) == before


def test_pruning_and_clearing_remove_only_checkpoint_files(tmp_path: Path) -> None:
    import torch

    from posenc.runs.run import clear_run
    from posenc.training import checkpoint as ck
    from posenc.training.checkpoint import prune

    ckpts = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        ck.save_checkpoint(ckpts / ck.checkpoint_name(step), {"w": torch.ones(2)}, state={"step": step})
    (ckpts / "ckpt_00000001" / "mine.txt").write_text("precious\n")
    assert [p.name for p in prune(ckpts, 1, set())] == ["ckpt_00000001", "ckpt_00000002"]
    assert sorted(p.name for p in ckpts.iterdir()) == ["ckpt_00000001", "ckpt_00000003"]
    assert [p.name for p in (ckpts / "ckpt_00000001").iterdir()] == ["mine.txt"]
    clear_run(tmp_path)
    assert [str(p.relative_to(tmp_path)) for p in sorted(tmp_path.rglob("*"))] == [
        "checkpoints", "checkpoints/ckpt_00000001", "checkpoints/ckpt_00000001/mine.txt"]
    with pytest.raises(Exception, match="posenc did not write"):  # never replaced by a new checkpoint either
        ck.save_checkpoint(ckpts / "ckpt_00000001", {"w": torch.ones(2)})
    assert (ckpts / "ckpt_00000001" / "mine.txt").read_text() == "precious\n"


# ------------------------------------------------------------------------------ 2, 3: translate --output

@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
def test_translate_output_is_never_the_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path,
                                             how: str) -> None:
    src = tmp_path / "f.txt"
    src.write_text("a b c\n")
    out = {"same path": src, "symlink": tmp_path / "link.txt", "hard link": tmp_path / "hard.txt"}[how]
    if how == "symlink":
        out.symlink_to(src)
    elif how == "hard link":
        os.link(src, out)
    before = md5s(tmp_path)
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", out)
    assert_one_line_error(code, err, "--output", "input file")
    assert md5s(tmp_path) == before


@pytest.mark.parametrize("target", ["spm.model", "config.yaml", "checkpoints/ckpt_00000003/model.safetensors",
                                    "new.txt", "data/train.src"])
def test_translate_output_inside_a_run_or_its_data_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             run_copy: Path, prepared: Path, target: str) -> None:
    data = tmp_path / "data"
    shutil.copytree(prepared, data)
    out = data / "train.src" if target == "data/train.src" else run_copy / target
    src = tmp_path / "in.txt"
    src.write_text("a b c\n")
    before = md5s(tmp_path)
    code, _, err = cli(capsys, "translate", "--run", run_copy, "--input", src, "--output", out)
    assert_one_line_error(code, err, "--output", "lies inside the posenc")
    assert md5s(tmp_path) == before


def test_translate_output_parent_must_exist(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("a b c\n")
    out = tmp_path / "nonexistent" / "dir" / "x.txt"
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", out)
    assert_one_line_error(code, err, "--output", "does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
    (tmp_path / "nonexistent" / "dir").mkdir(parents=True)
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", out)
    assert code == 0 and len(out.read_text().splitlines()) == 1, err


def test_translate_beam_is_bounded(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("a b c\n")
    code, out, err = cli(capsys, "translate", "--run", trained, "--input", src, "--beam", "100000")
    assert_one_line_error(code, err, "--beam 100000", "limit of 256")
    assert out == ""


# ------------------------------------------------------------------------------ 4: prepare --out SYMLINK, umask

def test_prepare_into_a_symlink_to_an_empty_directory_writes_into_its_target(capsys: pytest.CaptureFixture[str],
                                                                              tmp_path: Path) -> None:
    target, link = tmp_path / "bigdisk" / "data", tmp_path / "L"
    target.mkdir(parents=True)
    link.symlink_to(target)
    inode = target.stat().st_ino
    code, out, err = cli(capsys, "prepare", "--out", link, f"out_dir={tmp_path / 'run'}", *TOY, *TINY)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)  # the user's link stays as it was
    assert target.stat().st_ino == inode  # the user's directory too: filled in place, never renamed
    assert (target / "meta.json").is_file() and (target / "train.src").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != ".spm-cache") == []
    again = cli(capsys, "prepare", "--out", link, f"out_dir={tmp_path / 'run'}", *TOY, *TINY)
    assert again[0] == 0, again[2]  # its own data now: prepared already


def test_prepare_into_a_symlink_to_a_user_directory_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target, link = tmp_path / "mine", tmp_path / "L"
    target.mkdir()
    (target / "notes.txt").write_text("precious\n")
    link.symlink_to(target)
    before = md5s(tmp_path)
    code, _, err = cli(capsys, "prepare", "--out", link, f"out_dir={tmp_path / 'run'}", *TOY, *TINY)
    assert_one_line_error(code, err, "notes.txt")
    assert md5s(tmp_path) == before


@pytest.mark.parametrize("existing", [False, True])
def test_prepared_data_follows_the_umask(capsys: pytest.CaptureFixture[str], tmp_path: Path, existing: bool) -> None:
    out = tmp_path / "data"
    if existing:
        out.mkdir(mode=0o755)
    old = os.umask(0o022)
    try:
        code, _, err = cli(capsys, "prepare", "--out", out, f"out_dir={tmp_path / 'run'}", *TOY, *TINY)
    finally:
        os.umask(old)
    assert code == 0, err
    assert out.stat().st_mode & 0o777 == 0o755
    assert {f.name: f.stat().st_mode & 0o777 for f in out.iterdir() if f.name != ".posenc-run"} == {
        f.name: 0o644 for f in out.iterdir() if f.name != ".posenc-run"}


# ------------------------------------------------------------------------------ bench outputs, checked first

@pytest.mark.parametrize("flags, needle", [
    (["--out", "{tmp}/U"], "is a directory"),
    (["--plot", "{tmp}/F.txt"], "--plot"),
    (["--out", "{tmp}/nonexistent2/x.json"], "does not exist"),
    (["--plot", "{tmp}/nonexistent2/x.png"], "does not exist"),
])
def test_bench_outputs_are_checked_before_measuring(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, flags: list[str], needle: str) -> None:
    import posenc.bench.__main__ as bench

    (tmp_path / "U").mkdir()
    (tmp_path / "U" / "mine.txt").write_text("precious\n")
    measured: list[int] = []
    monkeypatch.setattr(bench, "run", lambda *a, **k: measured.append(1) or [])
    before = md5s(tmp_path)
    code = bench.main(["--quick", "--methods", "ape", *[f.format(tmp=tmp_path) for f in flags]])
    _, err = capsys.readouterr()
    assert_one_line_error(code, err, needle)
    assert measured == [] and md5s(tmp_path) == before


# ------------------------------------------------------------------------------ train: in use; budgets first

def test_a_second_train_into_a_directory_being_prepared_says_in_use(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path, prepared: Path) -> None:
    from posenc.runs.lock import exclusive

    run = tmp_path / "run"
    with exclusive(run):  # the first `posenc train`, still preparing its data (its .data.* build directory)
        (run / ".data.szg6i4yn").mkdir()
        code, _, err = cli(capsys, "train", *run_overrides(run, None))
        assert_one_line_error(code, err, "in use by another posenc process", f"pid {os.getpid()}")
        code, _, err = cli(capsys, "prepare", f"out_dir={run}", *TOY, *TINY)
        assert_one_line_error(code, err, "in use by another posenc process")
        assert sorted(p.name for p in run.iterdir()) == [".data.szg6i4yn", ".posenc.lock"]


@pytest.mark.parametrize("key", ["train.max_tokens", "data.max_train_len"])
def test_a_budget_no_pair_can_meet_is_refused_before_writing(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             key: str) -> None:
    run = tmp_path / "run"
    code, _, err = cli(capsys, "train", *run_overrides(run, None), f"{key}=1")
    assert_one_line_error(code, err, key, ">= 2")
    assert list(tmp_path.iterdir()) == []  # no run directory, no data/, no .spm-cache


@pytest.mark.parametrize("tool", ["hf_compare", "decode_ab"])
def test_other_bench_tools_check_out_before_measuring(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, tool: str) -> None:
    import importlib

    module = importlib.import_module(f"posenc.bench.{tool}")
    measured: list[int] = []
    monkeypatch.setattr(module, "run" if tool == "hf_compare" else "ab_records", lambda *a, **k: measured.append(1) or [])
    for out, needle in ((tmp_path, "is a directory"), (tmp_path / "nonexistent2" / "x.json", "does not exist")):
        code = module.main(["--out", str(out)])
        assert_one_line_error(code, capsys.readouterr().err, needle)
    assert measured == [] and list(tmp_path.iterdir()) == []
