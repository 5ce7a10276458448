"""``posenc train`` trains any task: the config's ``task:`` key (the one ``posenc experiment``
reads, or a ``task=NAME`` override) picks the task and its run schema, and the run goes through
the one training path (:func:`posenc.tasks.base.run_task`); an unknown task is one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from posenc.config import from_dict
from posenc.tasks.base import run_task
from posenc.tasks.lengthgen import LengthgenConfig, LengthgenTask
from tests.helpers.tiny import assert_one_line_error, cli

#: A lengthgen run of 3 updates on a CPU (seconds).
TINY_LENGTHGEN: dict[str, Any] = {
    "model": {"layers": 1, "d_model": 16, "heads": 2, "d_ff": 32, "position": {"name": "rope"}},
    "data": {"task": "parity", "train_max_length": 6, "test_max_length": 12, "test_step": 4, "batch_size": 4,
             "steps_per_epoch": 2, "eval_samples": 4, "eval_batch_size": 4},
    "train": {"max_steps": 3, "warmup": 2, "log_every": 1, "validate_every": 3, "save_every": 3, "device": "cpu",
              "num_threads": 1, "precision": "fp32"},
}


def test_train_trains_the_task_its_config_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``task: lengthgen`` trains a lengthgen run, the same run as ``run_task`` of the task itself."""
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"task": "lengthgen", **TINY_LENGTHGEN, "out_dir": str(tmp_path / "cli")}))
    code, out, err = cli(capsys, "train", "--config", path)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["steps"] == 3
    saved = yaml.safe_load((tmp_path / "cli" / "config.yaml").read_text())
    assert saved["data"]["task"] == "parity" and "position_ids" in saved["data"]  # a lengthgen run config
    metrics = json.loads((tmp_path / "cli" / "eval.json").read_text())
    assert [r["length"] for r in metrics["by_length"]] == [4, 8, 12]
    direct = run_task(LengthgenTask(), from_dict(LengthgenConfig, {**TINY_LENGTHGEN, "out_dir": str(tmp_path / "d")}))
    assert direct.metrics == metrics  # one training path: the CLI's run is run_task's


def test_a_task_override_picks_the_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``task=lengthgen`` on the command line: keys are checked against the lengthgen run schema
    (and, without it, against translation's, the default)."""
    code, _, err = cli(capsys, "train", "task=lengthgen", f"out_dir={tmp_path / 'r'}", "data.corpus=toy")
    assert_one_line_error(code, err, "data.corpus", "LengthgenData")
    code, _, err = cli(capsys, "train", f"out_dir={tmp_path / 'r'}", "data.curriculum_steps=3")
    assert_one_line_error(code, err, "curriculum_steps", "DataConfig")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("given", ["yaml", "override"])
def test_an_unknown_task_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str) -> None:
    out = tmp_path / "never"
    if given == "yaml":
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump({"task": "poetry", "out_dir": str(out)}))
        code, _, err = cli(capsys, "train", "--config", path)
    else:
        code, _, err = cli(capsys, "train", "task=poetry", f"out_dir={out}")
    assert_one_line_error(code, err, "'poetry'", "translation, lengthgen, speech, vision")
    assert not out.exists()


def test_a_task_that_is_not_a_name_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("task: [lengthgen]\n")
    code, _, err = cli(capsys, "train", "--config", path)
    assert_one_line_error(code, err, "task:", "['lengthgen']")
