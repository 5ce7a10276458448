"""``posenc export`` carries the run's tuned length penalty: an export of a run whose experiment
chose α on validation (results.json ``length_penalty.chosen``) decodes with that α by default and
says where it was read; a run without one exports its ``decode.length_penalty``; an unreadable
record is one line and writes nothing. The run is a tiny near-initial APE run (tests/helpers/tiny.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2", reason="the ctranslate2 package is not installed (pip install 'posenc[serve]')")

from posenc.cli.main import main  # noqa: E402
from posenc.serving.exported import load_export  # noqa: E402
from posenc.tasks.translation.load import load_run  # noqa: E402
from tests.helpers.tiny import NEAR_INIT, assert_one_line_error, cli, run_overrides  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("export-alpha") / "run"
    assert main(["train", *run_overrides(run, None, *NEAR_INIT, "model.position.name=ape")]) == 0
    return run


@pytest.fixture
def run(tmp_path: Path, trained: Path) -> Path:
    """A copy of the tiny run (its results.json is this test's own)."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


def _tuned(run: Path, alpha: object) -> None:
    (run / "results.json").write_text(json.dumps({"length_penalty": {"split": "valid", "chosen": alpha}}),
                                      encoding="utf-8")


def _export(capsys: pytest.CaptureFixture[str], run: Path, out: Path) -> dict:
    code, _, err = cli(capsys, "export", "--run", run, "--format", "ctranslate2", "--out", out)
    assert code == 0, err
    return json.loads((out / "posenc_export.json").read_text(encoding="utf-8"))


def test_the_export_decodes_with_the_tuned_alpha(capsys: pytest.CaptureFixture[str], run: Path, tmp_path: Path) -> None:
    configured = load_run(run).cfg.decode.length_penalty
    tuned = configured + 0.9
    _tuned(run, tuned)
    info = _export(capsys, run, tmp_path / "tuned")
    assert (info["decode"]["length_penalty"], info["length_penalty_from"]) == (tuned, "results.json length_penalty.chosen")
    assert load_export(tmp_path / "tuned").decode_options()["length_penalty"] == tuned  # what translate uses


def test_without_a_tuned_alpha_the_export_keeps_the_configured_one(capsys: pytest.CaptureFixture[str], run: Path,
                                                                   tmp_path: Path) -> None:
    info = _export(capsys, run, tmp_path / "plain")
    assert (info["decode"]["length_penalty"], info["length_penalty_from"]) == (
        load_run(run).cfg.decode.length_penalty, "decode.length_penalty")


@pytest.mark.parametrize("record", ["{not json", json.dumps({"length_penalty": {"chosen": -1}})])
def test_an_unreadable_tuning_record_is_one_line(capsys: pytest.CaptureFixture[str], run: Path, tmp_path: Path,
                                                 record: str) -> None:
    (run / "results.json").write_text(record, encoding="utf-8")
    code, _, err = cli(capsys, "export", "--run", run, "--format", "ctranslate2", "--out", tmp_path / "out")
    assert_one_line_error(code, err, "results.json", "decode.length_penalty")
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
