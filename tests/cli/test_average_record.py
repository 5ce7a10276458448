"""``posenc average`` writes the record of the run its checkpoints are of, as the averages
``posenc train`` writes do, and averages only checkpoints that record that one run: a checkpoint
recording no run or another one is refused in one line (exit 2), nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from posenc.training.checkpoint import list_checkpoints
from tests.helpers.files import snapshot
from tests.helpers.tiny import assert_one_line_error, cli


def _state(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / "state.json").read_text(encoding="utf-8"))


def _rewrite_record(ckpt: Path, section: str, key: str, value: Any) -> None:
    """Change one value of the record stored in ``ckpt``'s state.json (``section``: ``extension``
    or a section of its ``fingerprint``)."""
    state = _state(ckpt)
    record = state["record"]
    (record["extension"] if section == "extension" else record["fingerprint"][section])[key] = value
    (ckpt / "state.json").write_text(json.dumps(state), encoding="utf-8")


def test_the_average_records_the_run_of_its_checkpoints(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        trained: Path) -> None:
    out = tmp_path / "avg"
    assert cli(capsys, "average", "--run", trained, "--last", "2", "--output", out)[0] == 0
    recorded = {json.dumps(_state(c)["record"], sort_keys=True) for c in list_checkpoints(trained / "checkpoints")}
    assert len(recorded) == 1  # every checkpoint of the run records it
    fingerprint = json.loads((trained / "fingerprint.json").read_text(encoding="utf-8"))
    assert _state(out)["record"] == json.loads(recorded.pop()) == fingerprint


def test_a_run_extended_between_its_checkpoints_is_one_run(capsys: pytest.CaptureFixture[str],
                                                           run_copy: Path) -> None:
    """Checkpoints saved under another step cap (before the run was extended) are the run's: the
    average stores the run's record (its fingerprint.json), not the older checkpoint's."""
    ckpts = list_checkpoints(run_copy / "checkpoints")
    _rewrite_record(ckpts[-2], "extension", "max_steps", 1)
    assert _state(ckpts[-2])["record"] != _state(ckpts[-1])["record"]
    assert cli(capsys, "average", "--run", run_copy, "--last", "2")[0] == 0
    fingerprint = json.loads((run_copy / "fingerprint.json").read_text(encoding="utf-8"))
    assert _state(run_copy / "checkpoints" / "average")["record"] == fingerprint


@pytest.mark.parametrize("which", [-1, -2])
def test_a_checkpoint_of_another_run_is_not_averaged(capsys: pytest.CaptureFixture[str], run_copy: Path,
                                                     which: int) -> None:
    """Another seed: the checkpoint's model sections are the run's, its record is not."""
    ckpt = list_checkpoints(run_copy / "checkpoints")[which]
    seed = _state(ckpt)["record"]["fingerprint"]["train"]["seed"]
    _rewrite_record(ckpt, "train", "seed", seed + 1)
    before = snapshot(run_copy)
    code, _, err = cli(capsys, "average", "--run", run_copy, "--last", "2")
    assert_one_line_error(code, err, ckpt.name, "records another run", "train.seed")
    assert snapshot(run_copy) == before


def test_checkpoints_of_an_older_posenc_that_record_no_run_are_averaged(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path, run_copy: Path) -> None:
    """Checkpoints written before checkpoints recorded their run (``posenc train`` still resumes
    them) are checked by their model sections and averaged; the average stores the run's record
    (its fingerprint.json)."""
    for ckpt in list_checkpoints(run_copy / "checkpoints"):
        state = _state(ckpt)
        del state["record"]
        (ckpt / "state.json").write_text(json.dumps(state), encoding="utf-8")
    fingerprint = json.loads((run_copy / "fingerprint.json").read_text(encoding="utf-8"))
    assert cli(capsys, "average", "--run", run_copy, "--last", "2", "--output", tmp_path / "avg")[0] == 0
    assert _state(tmp_path / "avg")["record"] == fingerprint


def test_a_scoring_section_only_an_older_checkpoint_records_is_the_same_run(capsys: pytest.CaptureFixture[str],
                                                                            run_copy: Path) -> None:
    """A checkpoint of an older posenc that counted a scoring section (translation's ``decode``) in
    the fingerprint is the run's own; a value changed inside the fingerprint proper is not."""
    ckpt = list_checkpoints(run_copy / "checkpoints")[-2]
    state = _state(ckpt)
    assert "decode" not in state["record"]["fingerprint"]
    state["record"]["fingerprint"]["decode"] = {"beam": 4}
    (ckpt / "state.json").write_text(json.dumps(state), encoding="utf-8")
    assert cli(capsys, "average", "--run", run_copy, "--last", "2")[0] == 0
    _rewrite_record(ckpt, "model", "d_model", 7)
    code, _, err = cli(capsys, "average", "--run", run_copy, "--last", "2")
    assert_one_line_error(code, err, "records another run than")
