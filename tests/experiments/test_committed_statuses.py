"""One meaning of "converged" in every committed record: each stored status, ``converged`` and
``flat`` under docs/results (summary.json, results.json's ``summary``) is what the one rule
(src/posenc/training/convergence.py) decides now from the run's committed valid.csv, its stop
reason, warm-up and step cap; a run without a curve is "no curve"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.committed import rule_fields, stored_statuses

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
GRIDS = sorted(p.name for p in RESULTS.iterdir() if p.is_dir() and stored_statuses(p))


def test_every_grid_with_runs_is_checked() -> None:
    """Every committed grid directory holding run summaries is among the grids checked below."""
    with_runs = {p.parent.relative_to(RESULTS).parts[0] for p in RESULTS.rglob("valid.csv")}
    assert with_runs and with_runs <= set(GRIDS)


def _differences(grid: str) -> dict[str, tuple[dict, dict]]:
    """Each stored summary of ``grid`` whose status fields are not the rule's: (stored, rule)."""
    out = {}
    for run, name, summary in stored_statuses(RESULTS / grid):
        rule = rule_fields(run, summary)
        stored = {k: summary[k] for k in rule}
        if stored != rule:
            out[f"{run.relative_to(RESULTS)}/{name}"] = (stored, rule)
    return out


@pytest.mark.parametrize("grid", GRIDS)
def test_stored_statuses_are_the_rules(grid: str) -> None:
    assert _differences(grid) == {}
