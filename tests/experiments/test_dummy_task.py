"""A new task is one package. ``tests/dummy_task`` (its own config, model, loss and
experiment side) runs through ``posenc experiment`` end to end: found by its module path, trained
through run_task (an owned run directory), reused when fresh, refused or retrained when stale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers.tiny import assert_one_line_error, cli


def _write(tmp_path: Path, **extra: object) -> Path:
    exp = {"name": "dummy", "task": "tests.dummy_task", "out_dir": str(tmp_path / "exp"),
           "base": {"model": {"dim": 3}, "train": {"max_steps": 4}},
           "settings": {"plain": {}, "noisy": {"data.noise": 0.1}},
           "methods": {"nobias": {}, "bias": {"model.bias": True}}, "seeds": [1], **extra}
    path = tmp_path / "dummy.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    return path


def test_dummy_task_runs_end_to_end(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _write(tmp_path)
    code, out, _ = cli(capsys, "experiment", str(path))
    assert code == 0 and "| noisy | bias | 1 |" in out
    run = tmp_path / "exp" / "noisy" / "bias" / "seed1"
    for name in (".posenc-run", "config.yaml", "fingerprint.json", "summary.json", "results.json", "eval.json"):
        assert (run / name).is_file(), name  # run_task owned the run directory
    first = (run / "results.json").read_text()
    assert json.loads(first)["summary"]["steps"] == 4
    assert cli(capsys, "experiment", str(path))[0] == 0
    assert (run / "results.json").read_text() == first  # fresh: reused, not retrained
    code, _, err = cli(capsys, "experiment", str(path), "base.model.dim=2")
    assert_one_line_error(code, err, "--rerun-stale")
    assert cli(capsys, "experiment", str(path), "base.model.dim=2", "--rerun-stale")[0] == 0
    assert (run / "results.json").read_text() != first


def test_dummy_task_jobs_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Worker processes find the task from the experiment spec's ``task`` alone."""
    path = _write(tmp_path, settings={"plain": {}})
    code, out, _ = cli(capsys, "experiment", str(path), "--jobs", "2")
    assert code == 0 and out.count("done ") == 2
    assert sorted(p.name for p in (tmp_path / "exp" / "logs").glob("*.log")) == ["plain-bias-seed1.log", "plain-nobias-seed1.log"]


def test_lengthgen_run_dir_is_owned(tmp_path: Path) -> None:
    """A lengthgen run goes through run_task: marker + fingerprint; a foreign directory is refused."""
    from dataclasses import replace

    from posenc.config import load_config
    from posenc.errors import RunDirError
    from posenc.experiments.experiment import Cell
    from posenc.tasks.lengthgen import LengthgenExperimentConfig, expand
    from posenc.tasks.lengthgen.task import TASK
    from tests.tasks.lengthgen.test_task import CONFIGS

    exp = load_config(LengthgenExperimentConfig, CONFIGS / "lengthgen_cpu.yaml")
    grid, cell, cfg = TASK.experiment(exp), Cell("bucket_sort", "ape", 1), expand(exp)[0][3]
    cfg = replace(cfg, model=replace(cfg.model, d_model=16, d_ff=32, layers=1, heads=2),
                  data=replace(cfg.data, batch_size=4, eval_samples=4, eval_batch_size=4, test_max_length=20, test_step=10),
                  train=replace(cfg.train, max_steps=2, warmup=1, validate_every=1, save_every=1))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("mine")
    with pytest.raises(RunDirError, match="files posenc did not write"):
        TASK.run_cell_config(grid, cell, replace(cfg, out_dir=str(foreign)))
    assert sorted(p.name for p in foreign.iterdir()) == ["thesis.tex"]
    run = tmp_path / "run"
    TASK.run_cell_config(grid, cell, replace(cfg, out_dir=str(run)))
    assert (run / ".posenc-run").is_file() and (run / "fingerprint.json").is_file() and (run / "eval.json").is_file()


def test_a_users_report_directory_is_refused_before_training(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """ROOT/report holding a user's README.md: one line, exit 2, nothing trained or written, and
    ``posenc upgrade`` leaves it alone; an older posenc's report (no marker, its README headed with
    the grid's name) is refused in one line naming ``posenc upgrade``, which marks it as posenc's."""
    from posenc.runs.ownership import dir_kind

    path = _write(tmp_path, settings={"plain": {}})
    report = tmp_path / "exp" / "report"
    report.mkdir(parents=True)
    (report / "README.md").write_text("# my notes\n")
    code, _, err = cli(capsys, "experiment", str(path))
    assert_one_line_error(code, err, "report directory")
    assert (report / "README.md").read_text() == "# my notes\n"
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == ["report"]  # no cell trained
    code, _, err = cli(capsys, "upgrade", str(tmp_path / "exp"))
    assert_one_line_error(code, err, "holds no directory posenc wrote")
    assert sorted(p.name for p in report.iterdir()) == ["README.md"]
    (report / "README.md").write_text("# exp\n\nan older report\n")  # an older posenc's, headed with the grid's name
    code, _, err = cli(capsys, "experiment", str(path))
    assert_one_line_error(code, err, "report directory", "`posenc upgrade")
    assert cli(capsys, "upgrade", str(tmp_path / "exp"))[0] == 0
    assert cli(capsys, "experiment", str(path))[0] == 0
    assert dir_kind(report) == "report" and "an older report" not in (report / "README.md").read_text()


def test_jobs_never_write_over_a_users_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--jobs 2 keeps its spec and logs in ROOT/logs: a user's ROOT/experiment.json is not touched,
    and a ROOT/logs holding a user's file is refused in one line before any run."""
    path = _write(tmp_path, settings={"plain": {}})
    root = tmp_path / "exp"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "notes.txt").write_text("mine")
    code, _, err = cli(capsys, "experiment", str(path), "--jobs", "2")
    assert_one_line_error(code, err, "log directory")
    assert sorted(p.name for p in root.iterdir()) == ["logs"] and (root / "logs" / "notes.txt").read_text() == "mine"
    (root / "logs" / "notes.txt").unlink()
    (root / "experiment.json").write_text("my spec")
    assert cli(capsys, "experiment", str(path), "--jobs", "2")[0] == 0
    assert (root / "experiment.json").read_text() == "my spec" and (root / "logs" / "experiment.json").is_file()


def test_settings_on_a_grid_without_an_outer_axis_is_one_line(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    """``--settings`` on a grid without settings (vision, speech) says the grid has none, rather
    than listing an empty grid's settings; nothing trains."""
    path = _write(tmp_path, settings={})
    code, _, err = cli(capsys, "experiment", str(path), "--settings", "plain")
    assert_one_line_error(code, err, "posenc experiment: dummy has no settings (its grid has no outer axis): "
                                     "drop --settings")
    assert not (tmp_path / "exp").exists()
    assert cli(capsys, "experiment", str(path), "--methods", "bias")[0] == 0
    assert (tmp_path / "exp" / "bias" / "seed1" / "results.json").is_file()
