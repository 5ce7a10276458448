"""The committed lengthgen_small run (docs/results/lengthgen_small) answers the shipped config, every
method fits the training lengths and stops by patience (so the leaderboard is not empty), and the
leaderboard and time that docs/lengthgen.md quotes are read from its files."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from posenc.config import load_config
from posenc.experiments.runner import find_experiment
from posenc.tasks.lengthgen.config import LengthgenExperimentConfig
from posenc.tasks.lengthgen.report import collect, leaderboard, run_status
from posenc.tasks.lengthgen.task import TASK
from tests.helpers.committed import gnu_time

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "docs" / "results" / "lengthgen_small"


def _exp() -> LengthgenExperimentConfig:
    return replace(load_config(LengthgenExperimentConfig, find_experiment("lengthgen_small")), out_dir=str(COMMITTED))


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_cell_is_committed_fresh_fitted_and_converged() -> None:
    exp, results = _exp(), collect(COMMITTED)
    cells = {(r["task"], r["method"], r["seed"]) for r in results}
    assert cells == {(t, m, s) for t in exp.tasks for m in exp.methods for s in exp.seeds}
    assert all(TASK.verdict(TASK.experiment(exp), (r["task"], r["method"], r["seed"]), r).kind == "fresh" for r in results)
    assert {run_status(r) for r in results} == {"converged"}
    assert {r["summary"]["stopped"] for r in results} == {"patience"}  # the cap stayed a cap


def test_the_leaderboard_ranks_every_method_and_the_docs_quote_it() -> None:
    exp, results = _exp(), collect(COMMITTED)
    rows = [line for line in leaderboard(exp, results) if line.startswith("| bucket_sort |")]
    assert len(rows) == len(exp.methods)
    report = (COMMITTED / "report" / "README.md").read_text(encoding="utf-8")
    doc = (ROOT / "docs" / "lengthgen.md").read_text(encoding="utf-8")
    assert all(row in report and row in doc for row in rows)


def test_the_docs_state_the_recorded_time() -> None:
    cpu, wall = gnu_time(COMMITTED / "time.txt")
    doc = _flat((ROOT / "docs" / "lengthgen.md").read_text(encoding="utf-8"))
    assert f"{cpu:.0f} s of CPU time (user + system, {cpu / 60:.1f} min;" in doc
    assert f"{int(wall // 60)}:{int(wall % 60):02d} of wall time" in doc


def test_the_docs_steps_and_the_lengthgen_cpu_comparison_are_the_committed_runs() -> None:
    doc = _flat((ROOT / "docs" / "lengthgen.md").read_text(encoding="utf-8"))
    steps = {r["method"]: r["summary"]["steps"] for r in collect(COMMITTED)}
    assert (f"APE after {steps['ape']:,} updates, SHAPE {steps['shape']:,}, RoPE {steps['rope']:,}, "
            f"NoPE {steps['nope']:,}, {sum(steps.values()):,} in all") in doc
    assert f"(SHAPE then RoPE, {steps['shape'] + steps['rope']:,} of the {sum(steps.values()):,} updates)" in doc
    cpu = collect(ROOT / "docs" / "results" / "lengthgen_cpu")
    mean = {m: 100 * statistics.fmean(r["metrics"]["unseen_seq_acc"] for r in cpu
                                      if r["task"] == "bucket_sort" and r["method"] == m) for m in ("nope", "ape", "rope")}
    assert f"ranks NoPE ({mean['nope']:.1f} %) far above APE ({mean['ape']:.1f} %) and RoPE ({mean['rope']:.1f} %)" in doc
