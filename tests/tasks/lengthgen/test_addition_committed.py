"""The committed lengthgen_addition cells (docs/results/lengthgen_addition, issue 30's arithmetic
goal) answer the shipped config, and docs/lengthgen.md's addition table is their numbers."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

from posenc.config import load_config
from posenc.experiments.runner import find_experiment
from posenc.tasks.lengthgen.config import LengthgenExperimentConfig
from posenc.tasks.lengthgen.driver import TASK

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "docs" / "results" / "lengthgen_addition"
#: the columns of the docs table: sequence accuracy at these lengths (n = both operands' digits + 1)
LENGTHS = (21, 30, 36, 42, 60, 81)
#: the trainer's recorded status, as the table prints it
SHORT = {"converged": "conv", "still improving": "capped", "not flat": "not flat"}


def _results() -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(COMMITTED.glob("*/*/seed*/results.json"))]


def test_committed_cells_are_fresh() -> None:
    """Seeds 1-3 of every method, seed 1 only of the 20,000-update Abacus run."""
    exp = replace(load_config(LengthgenExperimentConfig, find_experiment("lengthgen_addition")), out_dir=str(COMMITTED))
    results = _results()
    expected = {(m, s) for m in exp.methods for s in ((1,) if m == "abacus-k30-20k" else (1, 2, 3))}
    assert {(r["method"], r["seed"]) for r in results} == expected
    assert {TASK.verdict(exp, (r["task"], r["method"], r["seed"]), r).kind for r in results} == {"fresh"}


def _fmt(values: list[float], spread: bool) -> str:
    mean = 100 * statistics.fmean(values)
    return f"{mean:.1f} ± {100 * statistics.stdev(values):.1f}" if spread and len(values) > 1 else f"{mean:.1f}"


def test_docs_table_is_the_committed_accuracy() -> None:
    doc = (ROOT / "docs" / "lengthgen.md").read_text(encoding="utf-8")
    by: dict[str, list[dict]] = {}
    for r in _results():
        by.setdefault(r["method"], []).append(r)
    for method, runs in by.items():
        runs.sort(key=lambda r: r["seed"])
        at = [{row["length"]: row["seq_acc"] for row in r["metrics"]["by_length"]} for r in runs]
        cells = [_fmt([r["metrics"]["seen_seq_acc"] for r in runs], True), *(_fmt([a[n] for a in at], False) for n in LENGTHS),
                 _fmt([r["metrics"]["unseen_token_acc"] for r in runs], True),
                 ", ".join(f"{SHORT[r['summary']['status']]} @ {r['summary']['steps']}" for r in runs)]
        assert f"| {method} | {len(runs)} | " + " | ".join(cells) + " |" in doc, method
