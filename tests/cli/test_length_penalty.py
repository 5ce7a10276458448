"""``posenc translate`` decodes a run with the α its experiment tuned on validation:
results.json's ``length_penalty.chosen`` is the default, ``--length-penalty A`` overrides it, and
every translations/*.json records the α it was decoded with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from posenc.tasks.translation.load import alpha_key
from tests.helpers.tiny import assert_one_line_error, cli


@pytest.fixture
def run(tmp_path: Path, trained: Path) -> Path:
    """A copy of the shared tiny run (its results.json is this test's own)."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


def _tuned(run: Path, alpha: Any) -> None:
    (run / "results.json").write_text(json.dumps({"length_penalty": {"split": "valid", "chosen": alpha}}), encoding="utf-8")


def _split_alpha(capsys: pytest.CaptureFixture[str], run: Path, prepared: Path, *extra: str) -> float:
    """The α of ``--split valid`` as printed and as recorded in translations/valid.beam<K>.json."""
    code, out, err = cli(capsys, "translate", "--run", run, "--split", "valid", "--data", prepared, *extra)
    assert code == 0, err
    scores = json.loads(out)
    path = (run / scores["hyp"]).with_suffix(".json")  # a user's decode is named by its beam and α
    written = json.loads(path.read_text(encoding="utf-8"))
    assert scores["length_penalty"] == written["length_penalty"] and f"lp{alpha_key(written['length_penalty'])}" in path.name
    return written["length_penalty"]


def test_split_decodes_with_the_tuned_alpha_unless_overridden(capsys: pytest.CaptureFixture[str], run: Path,
                                                              prepared: Path) -> None:
    assert _split_alpha(capsys, run, prepared) == 0.6  # no results.json: the run's decode.length_penalty
    _tuned(run, 1.7)
    assert _split_alpha(capsys, run, prepared) == 1.7
    assert _split_alpha(capsys, run, prepared, "--length-penalty", "0.3") == 0.3
    assert _split_alpha(capsys, run, prepared, "--length-penalty", "0") == 0.0


def test_input_lines_decode_with_the_tuned_alpha(capsys: pytest.CaptureFixture[str], run: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import posenc.cli.translate as translate

    seen: list[float] = []
    monkeypatch.setattr(translate, "translate_lines", lambda model, tok, lines, **opts: seen.append(opts["length_penalty"]) or [])
    source = tmp_path / "in.txt"
    source.write_text("a b c\n", encoding="utf-8")
    _tuned(run, 2.5)
    assert cli(capsys, "translate", "--run", run, "--input", source)[0] == 0
    assert cli(capsys, "translate", "--run", run, "--input", source, "--length-penalty", "1")[0] == 0
    assert seen == [2.5, 1.0]


@pytest.mark.parametrize("value", ["-0.5", "nan", "inf"])
def test_bad_length_penalty_is_one_line(capsys: pytest.CaptureFixture[str], run: Path, value: str) -> None:
    before = sorted((run / "translations").glob("*")) if (run / "translations").exists() else None
    code, _, err = cli(capsys, "translate", "--run", run, "--split", "valid", "--length-penalty", value)
    assert_one_line_error(code, err, "--length-penalty", ">= 0")
    after = sorted((run / "translations").glob("*")) if (run / "translations").exists() else None
    assert after == before  # nothing decoded or written


def test_unreadable_tuning_record_is_one_line(capsys: pytest.CaptureFixture[str], run: Path, prepared: Path) -> None:
    (run / "results.json").write_text("{not json", encoding="utf-8")
    code, _, err = cli(capsys, "translate", "--run", run, "--split", "valid", "--data", prepared)
    assert_one_line_error(code, err, "results.json", "--length-penalty")
    _tuned(run, -1)
    code, _, err = cli(capsys, "translate", "--run", run, "--split", "valid", "--data", prepared)
    assert_one_line_error(code, err, "length_penalty.chosen", ">= 0")
    assert _split_alpha(capsys, run, prepared, "--length-penalty", "0.9") == 0.9  # the override needs no record
