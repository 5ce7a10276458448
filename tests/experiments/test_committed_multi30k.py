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
from posenc.experiments import report
from posenc.training.convergence import CONVERGED, IMPROVING, NOT_FLAT, status_of

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
    """Read as the report reads them (summary, cap, valid.csv: the end-slope test of issue 26), not
    from the stored ``status``: 14 of 18 converged, one capped, three stopped on a falling curve."""
    exp, results = _exp(), _results()
    judged = {r["setting"] + "/" + r["method"] + f"/{r['seed']}": r["judged"] for r in report.judged(exp, list(results.values()))}
    assert {k: v["status"] for k, v in judged.items() if v["status"] != CONVERGED} == {
        "vanilla/shape/3": IMPROVING,  # stopped by the 8,000-update cap
        "vanilla/shape/1": NOT_FLAT, "vanilla/shape/2": NOT_FLAT, "vanilla/rpe/3": NOT_FLAT}
    assert results[("vanilla", "shape", 3)]["summary"]["stopped"] == "max_steps"
    assert round(judged["vanilla/shape/1"]["valid_slope"], 4) == -0.0192  # nats per 1,000 updates, last 8 validations
    assert all(status_of(r["summary"]) == r["summary"]["status"] for r in results.values())  # the older reading


def test_docs_table_is_the_committed_bleu() -> None:
    """docs/results.md §0b quotes mean ± sample std over the three seeds of each cell."""
    results = _results()
    docs = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for setting in ("vanilla", "extrapolate"):
        for method in ("ape", "shape", "rpe"):
            bleu = [results[(setting, method, s)]["scores"]["test"]["bleu"] for s in (1, 2, 3)]
            quoted = f"**{statistics.fmean(bleu):.2f} ± {statistics.stdev(bleu):.2f}**"
            assert quoted in docs, (setting, method, quoted)
