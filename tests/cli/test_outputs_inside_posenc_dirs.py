"""Outputs into posenc's own directories, a user's decode over an experiment's recorded
translations, and file modes. Each refusal is one line (exit 2) with the user's and posenc's files
byte for byte unchanged.

``translate --output`` / ``analyze --out`` / ``posenc.bench --out/--plot/--profile`` / ``export --out``
into a posenc report, logs, export, checkpoint or run (``test_*_inside_posenc_dirs*``, the symlink
tests); ``translate --split`` beside ``results.json``'s record (``test_translate_split_*``); modes
(``test_*mode*``, ``test_*umask*``).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from posenc.runs.ownership import write_marker
from tests.helpers.files import md5s
from tests.helpers.tiny import assert_one_line_error, cli


def _posenc_dirs(root: Path) -> dict[str, Path]:
    """A report, a log directory, an export (marked, and an older posenc's unmarked one with only
    its manifest), an average written outside a run: posenc's own files in each."""
    dirs = {name: root / name for name in ("report", "logs", "export", "old_export", "average")}
    for d in dirs.values():
        d.mkdir()
    (dirs["report"] / "README.md").write_text("# my experiment\n")
    (dirs["logs"] / "experiment.json").write_text("{}\n")
    write_marker(dirs["report"], "report")
    write_marker(dirs["logs"], "logs")
    for export in (dirs["export"], dirs["old_export"]):
        (export / "model.bin").write_bytes(b"\x01\x02weights")
        (export / "posenc_export.json").write_text('{"format": "ctranslate2"}\n')
    write_marker(dirs["export"], "export")
    (dirs["average"] / "model.safetensors").write_bytes(b"weights")
    (dirs["average"] / "state.json").write_text('{"kind": "average"}\n')
    return dirs


OUTPUT_FILES = ["report/README.md", "report/sub/new.txt", "logs/experiment.json", "export/model.bin",
                "export/new.txt", "average/model.safetensors"]


@pytest.mark.parametrize("target", OUTPUT_FILES)
def test_translate_output_inside_posenc_dirs_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        trained: Path, target: str) -> None:
    dirs = _posenc_dirs(tmp_path)
    (dirs["report"] / "sub").mkdir()
    src = tmp_path / "in.txt"
    src.write_text("a b c\n")
    before = md5s(tmp_path)
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", tmp_path / target)
    assert_one_line_error(code, err, "--output", "lies inside the posenc", str(tmp_path / target.split("/")[0]))
    assert md5s(tmp_path) == before


@pytest.mark.parametrize("flag, target", [("--out", "run/bench.json"), ("--plot", "export/bench.png"),
                                          ("--out", "report/bench.json"), ("--profile", "run/profile"),
                                          ("--profile", "logs/profile")])
def test_bench_outputs_inside_posenc_dirs_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, run_copy: Path, flag: str,
                                                      target: str) -> None:
    import posenc.bench.__main__ as bench

    _posenc_dirs(tmp_path)
    measured: list[int] = []
    monkeypatch.setattr(bench, "run", lambda *a, **k: measured.append(1) or [])
    before = md5s(tmp_path)
    code = bench.main(["--quick", "--methods", "ape", flag, str(tmp_path / target)])
    assert_one_line_error(code, capsys.readouterr().err, flag, "lies inside the posenc")
    assert measured == [] and md5s(tmp_path) == before


@pytest.mark.parametrize("target", ["run/analysis", "run/checkpoints/x", "export/analysis", "report/x/y"])
def test_analyze_out_inside_posenc_dirs_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, run_copy: Path,
                                                   target: str) -> None:
    _posenc_dirs(tmp_path)
    before = md5s(tmp_path)
    code, _, err = cli(capsys, "analyze", "length_bleu", "--experiment", "cape_mt_small", "--out", tmp_path / target)
    assert_one_line_error(code, err, "--out", "lies inside the posenc")
    assert md5s(tmp_path) == before


@pytest.mark.parametrize("target", ["run/checkpoints/x", "run/translations/exp", "run/exp", "report/exp",
                                    "export/nested"])
def test_export_out_inside_posenc_dirs_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, run_copy: Path,
                                                  target: str) -> None:
    pytest.importorskip("ctranslate2")
    _posenc_dirs(tmp_path)
    before = md5s(tmp_path)
    code, _, err = cli(capsys, "export", "--run", run_copy, "--format", "ctranslate2", "--out", tmp_path / target)
    assert_one_line_error(code, err, "--out", "lies inside the posenc")
    assert md5s(tmp_path) == before


def test_export_into_an_older_unmarked_export_once_upgraded(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             run_copy: Path) -> None:
    """An export of an older posenc (its manifest, no marker) is refused in one line naming
    ``posenc upgrade``, which marks it; then it is replaced, like a run."""
    pytest.importorskip("ctranslate2")
    old = _posenc_dirs(tmp_path)["old_export"]
    before = md5s(old)
    code, _, err = cli(capsys, "export", "--run", run_copy, "--format", "ctranslate2", "--out", old)
    assert_one_line_error(code, err, "--out", "posenc did not write", f"`posenc upgrade {old}`")
    assert md5s(old) == before
    assert cli(capsys, "upgrade", str(old))[0] == 0
    code, _, err = cli(capsys, "export", "--run", run_copy, "--format", "ctranslate2", "--out", old)
    assert code == 0, err
    assert json.loads((old / ".posenc-run").read_text())["kind"] == "export"
    assert json.loads((old / "posenc_export.json").read_text())["format"] == "ctranslate2"
    assert (old / "model.bin").read_bytes() != b"\x01\x02weights"


# ------------------------------------------------------------------------------ 4: translate --split

def _record(run: Path, hyp: str) -> None:
    """An experiment's stored decode of the test split (``hyp`` and its scores) and the
    results.json whose BLEU came from it, as the grid writes them."""
    (run / "translations").mkdir(exist_ok=True)
    (run / "translations" / hyp).write_text("the stored hypotheses\n")
    (run / "translations" / hyp.replace(".hyp", ".json")).write_text('{"bleu": 38.21}\n')
    scores = {"test": {"bleu": 38.21, "hyp": f"translations/{hyp}", "beam": 2}}
    (run / "results.json").write_text(json.dumps({"scores": scores, "length_penalty": {"chosen": 1.0}}))


def test_translate_split_writes_beside_the_experiments_record(capsys: pytest.CaptureFixture[str], run_copy: Path,
                                                               prepared: Path) -> None:
    _record(run_copy, "test.beam2.hyp")
    before = md5s(run_copy)
    code, out, err = cli(capsys, "translate", "--run", run_copy, "--split", "test", "--data", prepared)
    assert code == 0, err
    scores = json.loads(out)
    # decoded at the run's tuned α (results.json's length_penalty.chosen), named by it
    assert scores["hyp"] == "translations/test.beam2.lp1.hyp" and scores["length_penalty"] == 1.0
    after = md5s(run_copy)
    assert {k: after[k] for k in before} == before  # the record and results.json byte for byte
    new = ["translations/test.beam2.lp1.hyp", "translations/test.beam2.lp1.json"]
    assert sorted(set(after) - set(before)) == new
    assert len((run_copy / scores["hyp"]).read_text().splitlines()) == scores["lines"]


def test_translate_split_never_replaces_a_file_results_json_names(capsys: pytest.CaptureFixture[str], run_copy: Path,
                                                                  prepared: Path) -> None:
    _record(run_copy, "test.beam2.lp1.hyp")  # the name a decode at the tuned α = 1.0 would take
    before = md5s(run_copy)
    code, _, err = cli(capsys, "translate", "--run", run_copy, "--split", "test", "--data", prepared)
    assert_one_line_error(code, err, "test.beam2.lp1.hyp", "results.json")
    assert md5s(run_copy) == before


@pytest.mark.parametrize("name", ["test.beam2.lp0.6.hyp", "test.beam4.lp1.json", "valid.lp0.6.beam4.hyp",
                                  "test.beam4.hyp", ".test.beam4.lp0.6.hyp.x1y2.tmp"])
def test_no_resume_knows_every_translation_name_posenc_writes(name: str) -> None:
    """``--no-resume`` removes a user's decodes and the α sweep's files (they are posenc's)."""
    from posenc.runs.run import run_outputs
    from posenc.tasks.translation.spec import SPEC

    assert run_outputs(SPEC)["translations"].match(name)
    assert not run_outputs(SPEC)["translations"].match("notes.txt")


# ------------------------------------------------------------------------------ 5: file modes

@contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask, existing, expected", [(0o077, None, 0o600), (0o027, None, 0o640),
                                                      (0o022, None, 0o644), (0o022, 0o600, 0o600),
                                                      (0o077, 0o664, 0o664)],
                         ids=["umask077-new", "umask027-new", "umask022-new", "replaces-0600", "replaces-0664"])
def test_translate_output_mode_is_the_replaced_files_or_the_umasks(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                   trained: Path, mask: int, existing: int | None,
                                                                   expected: int) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("a b c\n")
    if existing is not None:
        out.write_text("old\n")
        out.chmod(existing)
    with _umask(mask):
        code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", out)
    assert code == 0, err
    assert _mode(out) == expected and out.read_text() != "old\n"


@pytest.mark.parametrize("writer", ["bench", "lines"])
def test_atomic_writers_follow_the_umask_and_keep_a_replaced_mode(tmp_path: Path, writer: str) -> None:
    """``posenc.bench --out`` (files.atomic_write_text) and data.text.write_lines_atomic."""
    from posenc.bench.report import write_json
    from posenc.data.text import write_lines_atomic

    write = {"bench": lambda p: write_json([{"a": 1}], p), "lines": lambda p: write_lines_atomic(p, ["x"])}[writer]
    new, old = tmp_path / "new.out", tmp_path / "old.out"
    old.write_text("mine\n")
    old.chmod(0o640)
    with _umask(0o077):
        write(new)
        write(old)
    assert (_mode(new), _mode(old)) == (0o600, 0o640)
    assert old.read_text() != "mine\n"


def test_translate_output_through_a_users_symlink(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 trained: Path) -> None:
    """``--output LINK`` (a symlink to the user's file elsewhere): the target gets the lines with its
    mode kept, the link stays as it was."""
    src, target, link = tmp_path / "in.txt", tmp_path / "results" / "hyp.txt", tmp_path / "latest.txt"
    src.write_text("a b c\n")
    target.parent.mkdir()
    target.write_text("old\n")
    target.chmod(0o640)
    link.symlink_to(target)
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", link)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() != "old\n" and len(target.read_text().splitlines()) == 1 and _mode(target) == 0o640
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["hyp.txt", "in.txt", "latest.txt", "results"]


def test_bench_out_through_a_users_symlink(tmp_path: Path) -> None:
    from posenc.bench.report import write_json

    target, link = tmp_path / "bench.json", tmp_path / "latest.json"
    target.write_text("[]\n")
    target.chmod(0o600)
    link.symlink_to(target)
    write_json([{"a": 1}], link)
    assert link.is_symlink() and json.loads(target.read_text()) == [{"a": 1}] and _mode(target) == 0o600


@pytest.mark.parametrize("inside", ["run/config.yaml", "run/new.txt", "export/model.bin", "report/README.md"])
def test_translate_output_link_into_posenc_dirs_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          run_copy: Path, inside: str) -> None:
    """A symlink whose target (an existing file or a new one) lies in a posenc directory is refused
    as that path is: the link is resolved before the check, and nothing is written through it."""
    _posenc_dirs(tmp_path)
    src, link = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("a b c\n")
    link.symlink_to(tmp_path / inside)
    before = md5s(tmp_path)
    code, _, err = cli(capsys, "translate", "--run", run_copy, "--input", src, "--output", link)
    assert_one_line_error(code, err, "--output", "lies inside the posenc", str(tmp_path / inside.split("/")[0]))
    assert md5s(tmp_path) == before


def test_bench_out_link_into_a_run_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch, run_copy: Path) -> None:
    import posenc.bench.__main__ as bench

    measured: list[int] = []
    monkeypatch.setattr(bench, "run", lambda *a, **k: measured.append(1) or [])
    (tmp_path / "bench.json").symlink_to(run_copy / "bench.json")
    before = md5s(tmp_path)
    code = bench.main(["--quick", "--methods", "ape", "--out", str(tmp_path / "bench.json")])
    assert_one_line_error(code, capsys.readouterr().err, "--out", "lies inside the posenc")
    assert measured == [] and md5s(tmp_path) == before


def test_export_directory_and_files_follow_the_umask(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                     run_copy: Path) -> None:
    pytest.importorskip("ctranslate2")
    out = tmp_path / "export"
    with _umask(0o027):
        code, _, err = cli(capsys, "export", "--run", run_copy, "--format", "ctranslate2", "--out", out)
    assert code == 0, err
    assert _mode(out) == 0o750 and {f.name: _mode(f) for f in out.iterdir()} == {f.name: 0o640 for f in out.iterdir()}
    (out / "model.bin").chmod(0o600)
    with _umask(0o022):  # an earlier export: each replaced file keeps its mode
        code, _, err = cli(capsys, "export", "--run", run_copy, "--format", "ctranslate2", "--out", out)
    assert code == 0, err
    assert _mode(out) == 0o750 and _mode(out / "model.bin") == 0o600 and _mode(out / "spm.model") == 0o640


def test_the_experiment_root_itself_is_the_users(tmp_path: Path) -> None:
    """README's rule: an experiment's root is the user's (a file may be written there), its
    ``report/``, ``data/`` and runs are posenc's (one-line refusal)."""
    from posenc.errors import PosencError
    from posenc.experiments.runner import run_experiment
    from posenc.runs.ownership import check_user_output
    from tests.experiments.tiny_grid import write_experiment

    run_experiment(str(write_experiment(tmp_path)), jobs=1)
    root = tmp_path / "exp"
    check_user_output(root / "notes.txt", "--output")  # accepted
    posenc_dirs = [root / "report", root / "data", *(p.parent for p in root.rglob("results.json"))]
    assert len(posenc_dirs) == 3
    for inside in posenc_dirs:
        with pytest.raises(PosencError, match="lies inside the posenc") as err:
            check_user_output(inside / "x.txt", "--output")
        assert "\n" not in str(err.value)
