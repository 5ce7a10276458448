"""docs/lengthgen.md's lengthgen_cpu section is the committed grid (docs/results/lengthgen_cpu):
its every-cell table, the unseen-accuracy table, the +randomized differences and the addition
paragraph's numbers are computed here from the committed results."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from posenc.config import load_config
from posenc.experiments.runner import find_experiment
from posenc.tasks.lengthgen.config import LengthgenExperimentConfig
from posenc.tasks.lengthgen.driver import collect
from posenc.tasks.lengthgen.report import long_table, table

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "docs" / "results" / "lengthgen_cpu"
DOC = ROOT / "docs" / "lengthgen.md"
#: the tasks of the +randomized comparison (the addition tasks fit no method: left out, as the docs say)
COMPARED = ("bucket_sort", "reverse", "parity", "copy")


def _exp() -> LengthgenExperimentConfig:
    return replace(load_config(LengthgenExperimentConfig, find_experiment("lengthgen_cpu")), out_dir=str(COMMITTED))


def _results(root: Path = COMMITTED) -> list[dict]:
    return collect(root)


def _mean(results: list[dict], task: str, method: str, key: str) -> float:
    return 100 * statistics.fmean(r["metrics"][key] for r in results if r["task"] == task and r["method"] == method)


def test_docs_tables_are_the_committed_cells() -> None:
    doc = DOC.read_text(encoding="utf-8")
    exp, results = _exp(), _results()
    assert len(results) == 162
    rows = [line for line in long_table(exp, results) if " @ " in line and not line.startswith("| task |")]
    assert len(rows) == 54 and all(row in doc for row in rows)
    unseen = [line for line in table(exp, results, "unseen_seq_acc") if line.split(" | ")[0][2:] in COMPARED]
    assert len(unseen) == 4 and all(row in doc for row in unseen)


def test_docs_randomized_differences() -> None:
    doc = DOC.read_text(encoding="utf-8")
    results = _results()
    diffs = []
    for task in COMPARED:
        cells = []
        for base in ("ape", "rope", "alibi"):
            a, b = (_mean(results, task, m, "unseen_seq_acc") for m in (base, f"{base}+randomized"))
            diffs.append(b - a)
            cells.append(f"{a:.1f} → {b:.1f} ({diffs[-1]:+.1f})".replace("-", "−"))
        assert f"| {task} | " + " | ".join(cells) + " |" in doc, task
    assert f"mean difference over the 12 pairs: **{statistics.fmean(diffs):+.1f} points**" in doc


def test_docs_addition_paragraph() -> None:
    doc = " ".join(DOC.read_text(encoding="utf-8").split())
    results = [r for r in _results() if r["task"].endswith("_addition")]
    assert len(results) == 54 and {r["summary"]["status"] for r in results} == {"still improving"}
    for task, word in (("decimal_addition", "decimal"), ("binary_addition", "binary")):
        seen = [_mean(results, task, m, "seen_seq_acc") for m in _exp().methods]
        assert max(seen) < 95
        assert f"{word} {min(seen):.1f}–{max(seen):.1f} %" in doc
    unseen = [_mean(results, t, m, "unseen_seq_acc") for t in ("decimal_addition", "binary_addition") for m in _exp().methods]
    assert f"so their {min(unseen):.1f}–{max(unseen):.1f} % unseen" in doc  # cell means
    frontier = {(r["task"], r["method"], r["seed"]): r for r in _results(ROOT / "docs" / "results" / "lengthgen_frontier")}
    for r in results:
        other = frontier[(r["task"], r["method"], r["seed"])] if r["method"] in ("rope", "nope") else None
        if other is not None and r["task"] == "decimal_addition":
            assert other["metrics"] == r["metrics"]  # the same config reproduces exactly
    one = [100 * g[("binary_addition", "rope", 1)]["metrics"]["seen_seq_acc"]
           for g in ({(r["task"], r["method"], r["seed"]): r for r in results}, frontier)]
    assert f"seen {one[0]:.1f} against {one[1]:.1f} % for RoPE seed 1" in doc
    first = [(root / "binary_addition/nope/seed2/train.csv").read_text(encoding="utf-8").splitlines()[1].split(",")
             for root in (COMMITTED, ROOT / "docs" / "results" / "lengthgen_frontier")]
    assert first[0][0] == first[1][0] == "100" and first[0][6] == first[1][6]  # update 100, the same token count
    assert f"({first[0][2]} against {first[1][2]} at update 100 for NoPE seed 2, the {int(first[0][6]):,} target tokens" in doc
