"""The committed lengthgen_addition cells (docs/results/lengthgen_addition, issue 30's arithmetic
goal) answer the shipped config, and docs/lengthgen.md's addition table is their numbers."""

from __future__ import annotations

import json
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


def _results() -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(COMMITTED.glob("*/*/seed*/results.json"))]


def test_committed_cells_are_fresh_seed_one_of_every_method() -> None:
    exp = replace(load_config(LengthgenExperimentConfig, find_experiment("lengthgen_addition")), out_dir=str(COMMITTED))
    results = _results()
    assert sorted(r["method"] for r in results) == sorted(exp.methods) and {r["seed"] for r in results} == {1}
    assert {TASK.verdict(exp, (r["task"], r["method"], r["seed"]), r).kind for r in results} == {"fresh"}


def test_docs_table_is_the_committed_accuracy() -> None:
    doc = (ROOT / "docs" / "lengthgen.md").read_text(encoding="utf-8")
    for r in _results():
        m, s = r["metrics"], r["summary"]
        at = {row["length"]: row["seq_acc"] for row in m["by_length"]}
        cells = [f"{100 * m['seen_seq_acc']:.1f}", *(f"{100 * at[n]:.1f}" for n in LENGTHS),
                 f"{100 * m['unseen_token_acc']:.1f}", f"{s['status']} @ {s['steps']}"]
        assert f"| {r['method']} | " + " | ".join(cells) + " |" in doc, r["method"]
