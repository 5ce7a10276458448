"""Results are never stale: a finished run is reused only when its
stored fingerprint matches the current config; a longer budget resumes training; a changed model
stops with one line naming the key, or retrains with --rerun-stale; a changed decoding re-scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc.config import load_config
from posenc.errors import RunDirError
from posenc.runs.same_run import RunRecord, same_run
from posenc.tasks.translation.experiment import ExperimentConfig
from posenc.tasks.translation.freshness import evaluation_record
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.grids import grid_of_config
from tests.helpers.tiny import assert_one_line_error, cli


def _results(path: Path) -> dict:
    exp = load_config(ExperimentConfig, path)
    return json.loads((Path(grid_of_config(exp).run_config(("vanilla", "ape", 1)).out_dir) / "results.json").read_text())


def _cfg(tmp_path: Path, **kw):
    exp = load_config(ExperimentConfig, write_experiment(tmp_path, **kw))
    return grid_of_config(exp).run_config(("vanilla", "ape", 1)), exp.splits


def run_record(cfg, splits: list[str]) -> dict:
    """What a translation cell's results.json records about ``cfg`` (the run's record)."""
    return RunRecord.of(cfg, evaluation_record(cfg, splits)).to_dict()


def _judge(saved: tuple, current: tuple, steps: int | None = None):
    """same_run of a translation cell's record (written for ``saved``) against ``current``."""
    cfg, splits = current
    return same_run(RunRecord.read(run_record(*saved), steps), cfg, evaluation_record(cfg, splits))


def test_judge_verdicts(tmp_path: Path) -> None:
    base = _cfg(tmp_path)
    assert _judge(base, base).kind == "fresh"
    longer = _cfg(tmp_path, train={"max_steps": 5})
    v = _judge(base, longer, steps=3)
    assert (v.kind, v.detail, v.keys) == ("extend", "train.max_steps (3 -> 5)", ("train.max_steps",))
    assert _judge(longer, base, steps=5).kind == "stale"  # 5 steps trained cannot answer a 3-step budget
    wider = _cfg(tmp_path, model={"d_model": 48})
    v = _judge(base, wider)
    assert v.kind == "stale" and v.detail.startswith("model.d_model (32 -> 48)") and "model.d_model" in v.keys
    assert _judge(base, _cfg(tmp_path, decode={"beam": 3})).kind == "rescore"
    for older in (None, {"config": {}}, run_record(*base)["fingerprint"]):  # no record: never judged
        with pytest.raises(RunDirError, match="holds no run record .*`posenc upgrade DIR`"):
            RunRecord.read(older)


def test_longer_budget_is_not_answered_from_old_results(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_experiment(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    first = _results(path)
    assert first["summary"]["steps"] == 3 and first["record"]["extension"]["max_steps"] == 3
    write_experiment(tmp_path, train={"max_steps": 5})
    code, out, _ = cli(capsys, "experiment", path)
    second = _results(path)
    assert code == 0 and second["summary"]["steps"] == 5  # resumed from step 3, not the old results
    assert second["record"]["extension"]["max_steps"] == 5
    assert "done ape        vanilla      seed 1   test BLEU" in out and "steps      5" in out


def test_changed_model_stops_or_reruns(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_experiment(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    write_experiment(tmp_path, model={"d_model": 48, "d_ff": 64})
    code, _, err = cli(capsys, "experiment", path)
    assert_one_line_error(code, err, "model.d_model (32 -> 48)")
    assert "--rerun-stale" in err and _results(path)["record"]["fingerprint"]["model"]["d_model"] == 32
    code, _, _ = cli(capsys, "experiment", path, "--rerun-stale")
    rerun = _results(path)
    assert code == 0 and rerun["record"]["fingerprint"]["model"]["d_model"] == 48 and rerun["summary"]["steps"] == 3


def test_rerun_stale_keeps_files_posenc_did_not_write(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_experiment(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    run_dir = Path(grid_of_config(load_config(ExperimentConfig, path)).run_config(("vanilla", "ape", 1)).out_dir)
    (run_dir / "notes.txt").write_text("mine\n", encoding="utf-8")
    write_experiment(tmp_path, model={"d_model": 48, "d_ff": 64})
    code, _, _ = cli(capsys, "experiment", path, "--rerun-stale")
    assert code == 0 and _results(path)["record"]["fingerprint"]["model"]["d_model"] == 48
    assert (run_dir / "notes.txt").read_text(encoding="utf-8") == "mine\n"  # never rmtree a run dir


def test_changed_decoding_rescores_without_training(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_experiment(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    run_dir = Path(grid_of_config(load_config(ExperimentConfig, path)).run_config(("vanilla", "ape", 1)).out_dir)
    weights = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*.safetensors")}
    assert weights
    write_experiment(tmp_path, decode={"beam": 1})
    assert cli(capsys, "experiment", path)[0] == 0
    result = _results(path)
    assert result["scores"]["test"]["beam"] == 1 and result["record"]["evaluation"]["decode"]["beam"] == 1
    assert {p: p.stat().st_mtime_ns for p in weights} == weights  # no training happened


def test_results_without_a_record_are_refused_naming_the_upgrade(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    """A results.json that holds no record (an older posenc's) is never reused nor retrained: one
    line names the file and ``posenc upgrade``."""
    path = write_experiment(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    done = Path(grid_of_config(load_config(ExperimentConfig, path)).run_config(("vanilla", "ape", 1)).out_dir) / "results.json"
    legacy = json.loads(done.read_text())
    del legacy["record"]
    done.write_text(json.dumps(legacy))
    code, _, err = cli(capsys, "experiment", path)
    assert_one_line_error(code, err, f"{done} holds no run record", "`posenc upgrade DIR`")


def test_where_a_run_trained_never_makes_it_stale(tmp_path: Path) -> None:
    """device and num_threads are recorded but do not change the verdict; a longer cap still does."""
    cfg, splits = _cfg(tmp_path, train={"device": "cpu", "num_threads": 1})
    gpu = run_record(*_cfg(tmp_path, train={"device": "cuda", "num_threads": 0}))
    assert same_run(RunRecord.read(gpu), cfg, evaluation_record(cfg, splits)).kind == "fresh"
    gpu["extension"]["max_steps"] = 2
    assert same_run(RunRecord.read(gpu), cfg, evaluation_record(cfg, splits)).kind == "extend"
