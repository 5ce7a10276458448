"""``posenc experiment --jobs N``: worker processes give the same results as one process, one
log per run, a summary line per run; GPU slots round robin; the submitit backend (local executor)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc.config import load_config
from posenc.experiments.scheduler import log_path, run_submitit
from posenc.experiments.tasks import task_of
from posenc.processes import worker_env
from posenc.tasks.translation.experiment import ExperimentConfig, experiment_of, run_config
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.grids import grid_of_config
from tests.helpers.tiny import assert_one_line_error, cli

METHODS, SEEDS = ("ape", "shape"), (1, 2)


def _scores(path: Path) -> dict[tuple, tuple]:
    exp = load_config(ExperimentConfig, path)
    out = {}
    for cell in experiment_of(exp).cells():
        r = json.loads((Path(run_config(exp, *cell).out_dir) / "results.json").read_text())
        out[cell] = (r["scores"]["test"]["bleu"], r["summary"]["steps"], r["summary"]["status"])
    return out


def test_jobs_2_equals_jobs_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    serial = write_experiment(tmp_path / "serial", methods=METHODS, seeds=SEEDS)
    parallel = write_experiment(tmp_path / "parallel", methods=METHODS, seeds=SEEDS)
    assert cli(capsys, "experiment", serial)[0] == 0
    code, out, _ = cli(capsys, "experiment", parallel, "--jobs", "2")
    assert code == 0
    assert _scores(parallel) == _scores(serial)  # same seeds → same BLEU, steps and status
    exp = load_config(ExperimentConfig, parallel)
    done = [line for line in out.splitlines() if line.startswith("done ")]
    assert len(done) == len(experiment_of(exp).cells()) == 4
    for cell in experiment_of(exp).cells():
        setting, method, seed = cell
        assert any(f" {method} " in line and f"seed {seed} " in line for line in done)
        assert f"== {setting}/{method}/seed{seed} ->" in log_path(exp, cell).read_text()  # its own log
    assert sorted(p.name for p in (exp.root / "logs").glob("*.log")) == sorted(
        f"vanilla-{m}-seed{s}.log" for m in METHODS for s in SEEDS)
    # the data directory was prepared once, before the fan-out, and shared
    assert len([p for p in (exp.root / "data").iterdir() if not p.name.startswith(".")]) == 1


def test_worker_env_round_robin_and_threads() -> None:
    envs = [worker_env(slot, 5, ["0", "1"], cores=16) for slot in range(5)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "0", "1", "0"]  # several runs per GPU
    assert {e["OMP_NUM_THREADS"] for e in envs} == {"3"}  # 16 cores // 5 jobs
    cpu = worker_env(0, 4, [], cores=2)
    assert cpu["OMP_NUM_THREADS"] == "1" and cpu.get("CUDA_VISIBLE_DEVICES") == __import__("os").environ.get("CUDA_VISIBLE_DEVICES")
    import posenc

    first = cpu["PYTHONPATH"].split(__import__("os").pathsep)[0]
    assert Path(first) == Path(posenc.__file__).resolve().parents[1]  # workers import this very package


def test_bad_jobs_and_backend(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_experiment(tmp_path)
    code, _, err = cli(capsys, "experiment", path, "--jobs", "0")
    assert_one_line_error(code, err, "--jobs must be >= 1")


def test_a_failed_cell_is_named_by_its_run_directory(tmp_path: Path) -> None:
    """A failed worker's line names the cell as its run directory below the grid's root."""
    from posenc.experiments.experiment import Cell
    from posenc.experiments.scheduler import _finished

    whole = grid_of_config(load_config(ExperimentConfig, write_experiment(tmp_path, methods=("ape",), seeds=(1,))))
    cell = Cell("vanilla", "ape", 1)
    assert Path(whole.run_config(cell).out_dir) == whole.root / "vanilla" / "ape" / "seed1"
    assert _finished(whole, task_of(whole), cell, 3) == f"FAILED vanilla/ape/seed1 (exit 3); see {log_path(whole, cell)}"


def test_submitit_local_backend(tmp_path: Path) -> None:
    pytest.importorskip("submitit", reason="submitit not installed (pip install submitit; in the test extra)")
    path = write_experiment(tmp_path, methods=("ape",), seeds=(1,))
    exp = load_config(ExperimentConfig, path)
    whole = grid_of_config(exp)
    task_of(whole).prepare(whole, whole.cells())
    assert run_submitit(whole, task_of(whole), whole.cells(), 1, cluster="debug") == []
    r = json.loads((Path(run_config(exp, "vanilla", "ape", 1).out_dir) / "results.json").read_text())
    assert r["summary"]["steps"] == 3 and r["record"]["extension"]["max_steps"] == 3


def test_worker_logs_are_appended_across_attempts(tmp_path: Path) -> None:
    """A rerun truncated each worker's log; now every attempt is appended under a header."""
    import sys

    from posenc.processes import run_processes

    log = tmp_path / "logs" / "cell.log"
    for attempt in ("first", "second"):
        argv = [sys.executable, "-c", f"print('{attempt} attempt')", "x", "y"]
        assert run_processes([("cell", argv, log)], 1, lambda key, code: f"{key}: {code}", poll_s=0.05) == []
    lines = log.read_text().splitlines()
    assert [line for line in lines if line.endswith("attempt")] == ["first attempt", "second attempt"]
    assert sum(line.startswith("==== posenc worker started") for line in lines) == 2


def test_signals_give_the_shells_exit_codes() -> None:
    import signal

    from posenc.processes import Interrupted, interrupt_exit_code

    assert interrupt_exit_code(Interrupted(signal.SIGTERM)) == 143
    assert interrupt_exit_code(Interrupted(signal.SIGINT)) == 130
    assert interrupt_exit_code(KeyboardInterrupt()) == 130  # Python's own Ctrl-C
