"""The committed multi30k_cpu grid (docs/results/multi30k_cpu, issue 17 part 4) answers the shipped
config: every cell is fresh (trained on a lent GPU in fp32, which only the placement keys record),
each run's status is the one convergence rule's, and the tables in docs/results.md are the mean ±
std of the committed per-run BLEU."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

from posenc.config import load_config
from posenc.experiments.config import ExperimentConfig
from posenc.experiments.runner import find_experiment, grid, verdict
from posenc.training.convergence import CONVERGED, status_of

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results" / "multi30k_cpu"


def _exp() -> ExperimentConfig:
    return replace(load_config(ExperimentConfig, find_experiment("multi30k_cpu")), out_dir=str(COMMITTED))


def _results() -> dict[tuple[str, str, int], dict]:
    return {cell: json.loads((COMMITTED / cell[0] / cell[1] / f"seed{cell[2]}" / "results.json").read_text(encoding="utf-8"))
            for cell in grid(_exp())}


def test_every_committed_cell_is_fresh() -> None:
    exp = _exp()
    cells = grid(exp)
    assert len(cells) == 2 * 3 * 3
    assert {cell: verdict(exp, *cell).kind for cell in cells} == dict.fromkeys(cells, "fresh")


def test_statuses_follow_the_one_rule() -> None:
    results = _results()
    statuses = {cell: status_of(r["summary"]) for cell, r in results.items()}
    assert all(statuses[cell] == r["summary"]["status"] for cell, r in results.items())
    capped = [cell for cell, s in statuses.items() if s != CONVERGED]
    assert capped == [("vanilla", "shape", 3)]  # stopped by the 8,000-update cap: "still improving"
    assert results[("vanilla", "shape", 3)]["summary"]["stopped"] == "max_steps"


def test_docs_table_is_the_committed_bleu() -> None:
    """docs/results.md §0b quotes mean ± sample std over the three seeds of each cell."""
    results = _results()
    docs = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for setting in ("vanilla", "extrapolate"):
        for method in ("ape", "shape", "rpe"):
            bleu = [results[(setting, method, s)]["scores"]["test"]["bleu"] for s in (1, 2, 3)]
            quoted = f"**{statistics.fmean(bleu):.2f} ± {statistics.stdev(bleu):.2f}**"
            assert quoted in docs, (setting, method, quoted)
