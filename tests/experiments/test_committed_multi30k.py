"""The committed multi30k_cpu grid (docs/results/multi30k_cpu) answers the shipped
config: every cell is fresh (trained on a lent GPU in fp32, which only the placement keys record),
each run's status is the one convergence rule's, and the tables in docs/results.md are the mean ±
std of the committed per-run BLEU."""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import replace
from pathlib import Path

from posenc.config import load_config
from posenc.experiments.runner import find_experiment
from posenc.tasks.translation import report
from posenc.tasks.translation.experiment import ExperimentConfig
from posenc.training.convergence import CONVERGED, IMPROVING, NO_CURVE, NOT_FLAT, status_of
from tests.experiments.claims import csv_rows
from tests.helpers.grids import grid_of_config, verdict_now

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results" / "multi30k_cpu"


def _exp() -> ExperimentConfig:
    return replace(load_config(ExperimentConfig, find_experiment("multi30k_cpu")), out_dir=str(COMMITTED))


def _results() -> dict[tuple[str, str, int], dict]:
    return {cell: json.loads((COMMITTED / cell[0] / cell[1] / f"seed{cell[2]}" / "results.json").read_text(encoding="utf-8"))
            for cell in grid_of_config(_exp()).cells()}


def test_every_committed_cell_is_fresh() -> None:
    grid = grid_of_config(_exp())
    cells = grid.cells()
    assert len(cells) == 2 * 3 * 3
    assert {cell: verdict_now(grid, cell).kind for cell in cells} == dict.fromkeys(cells, "fresh")


def test_statuses_follow_the_one_rule() -> None:
    """Read as the report reads them (summary, cap, valid.csv: the end-slope test), and stored so:
    14 of 18 converged, one capped, three stopped on a falling curve."""
    exp, results = _exp(), _results()
    judged = {r["setting"] + "/" + r["method"] + f"/{r['seed']}": r["judged"] for r in report.judged(exp, list(results.values()))}
    assert {k: v["status"] for k, v in judged.items() if v["status"] != CONVERGED} == {
        "vanilla/shape/3": IMPROVING,  # stopped by the 8,000-update cap
        "vanilla/shape/1": NOT_FLAT, "vanilla/shape/2": NOT_FLAT, "vanilla/rpe/3": NOT_FLAT}
    assert results[("vanilla", "shape", 3)]["summary"]["stopped"] == "max_steps"
    assert round(judged["vanilla/shape/1"]["valid_slope"], 4) == -0.0192  # nats per 1,000 updates, last 8 validations
    # the stored status is the rule's; the summary alone (no validation curve, no recorded
    # flatness) is never "converged"
    assert {f"{s}/{m}/{seed}": r["summary"]["status"] for (s, m, seed), r in results.items()} == {
        k: v["status"] for k, v in judged.items()}
    assert all(status_of(r["summary"]) == {CONVERGED: NO_CURVE, NOT_FLAT: NO_CURVE}.get(r["summary"]["status"],
                                                                                       r["summary"]["status"])
               for r in results.values())


def test_docs_table_is_the_committed_bleu() -> None:
    """docs/results.md §0b quotes mean ± sample std over the three seeds of each cell."""
    results = _results()
    docs = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for setting in ("vanilla", "extrapolate"):
        for method in ("ape", "shape", "rpe"):
            bleu = [results[(setting, method, s)]["scores"]["test"]["bleu"] for s in (1, 2, 3)]
            quoted = f"**{statistics.fmean(bleu):.2f} ± {statistics.stdev(bleu):.2f}**"
            assert quoted in docs, (setting, method, quoted)


def _replay(history: list[tuple[int, float]], **options) -> int | None:  # noqa: ANN003
    """The step at which patience 4 (min_delta 0.001) stops ``history`` under ``options``; None: never."""
    from posenc.training.config import TrainConfig
    from posenc.training.state import TrainState
    from posenc.training.stopping import record_validation

    state, cfg = TrainState(), TrainConfig(patience=4, min_delta=0.001, **options)
    for step, loss in history:
        state.step = step
        if record_validation(state, loss, cfg):
            return step
    return None


def test_stopping_options_replayed_on_the_committed_curves() -> None:
    """docs/experiments.md: the defaults reproduce every recorded stop; require_flat keeps exactly
    the three runs that stopped on a falling curve training; smooth_window 4 would move 13 of 18."""
    stops: dict[str, tuple[int | None, ...]] = {}
    for (setting, method, seed), r in _results().items():
        with (COMMITTED / setting / method / f"seed{seed}" / "valid.csv").open(encoding="utf-8") as fh:
            history = [(int(float(row["step"])), float(row["loss"])) for row in csv.DictReader(fh)]
        recorded = r["summary"]["steps"] if r["summary"]["stopped"] == "patience" else None
        stops[f"{setting}/{method}/{seed}"] = (recorded, _replay(history), _replay(history, require_flat=True),
                                               _replay(history, smooth_window=4))
    assert all(rec == raw for rec, raw, _, _ in stops.values())
    assert sorted(k for k, (rec, _, flat, _) in stops.items() if flat != rec) == [
        "vanilla/rpe/3", "vanilla/shape/1", "vanilla/shape/2"]
    assert sum(smooth != rec for rec, _, _, smooth in stops.values()) == 13


def test_docs_quote_the_test_across_seeds() -> None:
    """docs/results.md's across-seed p-values (Welch, 3 seeds) are those of the committed BLEU."""
    from posenc.evaluation.seeds import seed_test

    results = _results()
    bleu = {(s, m): [results[(s, m, seed)]["scores"]["test"]["bleu"] for seed in (1, 2, 3)]
            for s in ("vanilla", "extrapolate") for m in ("ape", "shape", "rpe")}
    p = {(s, a, b): seed_test(bleu[(s, a)], bleu[(s, b)]).p for s in ("vanilla", "extrapolate")
         for a, b in (("rpe", "ape"), ("ape", "shape"))}
    doc = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    shape_p = f"p = {p[('vanilla', 'ape', 'shape')]:.2f} and\n{p[('extrapolate', 'ape', 'shape')]:.3f}"
    assert f"(p = {p[('vanilla', 'ape', 'shape')]:.2f} and" in doc and shape_p.split()[-1] + ")" in doc
    assert f"RPE > APE is not (p = {p[('vanilla', 'rpe', 'ape')]:.2f} and {p[('extrapolate', 'rpe', 'ape')]:.2f})" in doc
    assert f"VANILLA p = {p[('vanilla', 'rpe', 'ape')]:.2f}, EXTRAPOLATE\np = {p[('extrapolate', 'rpe', 'ape')]:.2f}" in doc


def _section() -> str:
    """docs/results.md §0b, whitespace-normalized."""
    doc = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    return " ".join(doc.split("## 0b.")[1].split("\n## ")[0].split())


def _csv(*parts: str) -> list[dict[str, str]]:
    """A committed report CSV's rows of non-empty buckets."""
    return [r for r in csv_rows(COMMITTED.joinpath(*parts)) if r["sentences"] != "0"]


def _signed(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def test_length_tables_are_the_regenerated_report() -> None:
    """§0b's BLEU-by-length table, its reading and the output-length numbers are the committed
    report's EXTRAPOLATE length_bleu.csv / length_diff.csv (seeds pooled, subwords)."""
    text, rows = _section(), _csv("report", "extrapolate", "length_bleu", "length_bleu.csv")
    by = {m: [r for r in rows if r["model"] == m] for m in ("ape", "shape", "rpe")}
    assert "| sentences (×3) | " + " | ".join(f"{int(r['sentences']):,}" for r in by["ape"]) + " |" in text
    assert "| APE | " + " | ".join(f"{float(r['bleu']):.1f}" for r in by["ape"]) + " |" in text
    for method, label in (("shape", "SHAPE"), ("rpe", "RPE")):
        assert f"| {label} − APE | " + " | ".join(_signed(float(r["gain"])) for r in by[method]) + " |" in text
    seen = [float(r["gain"]) for r in by["shape"] if r["seen"] == "True"]
    straddle = next(r for r in by["shape"] if r["bucket"] == "20-24")
    longer = [r for r in by["ape"] if int(r["bucket"].split("-")[0]) >= 25]
    assert straddle["seen"] == "False" and [r["bucket"] for r in by["shape"] if r["seen"] == "True"] == ["5-9", "10-14", "15-19"]
    assert (f"(5–19 subwords: {_signed(max(seen))} to {_signed(min(seen))}) and on 20–24 subwords "
            f"({_signed(float(straddle['gain']))})") in text
    assert f"on the longer buckets ({sum(int(r['sentences']) for r in longer)} sentence-seeds in all)" in text
    assert all(float(r["gain"]) >= 0 for r in by["shape"] + by["rpe"] if int(r["bucket"].split("-")[0]) >= 25)
    diff = {(r["model"], r["bucket"]): float(r["mean_diff"]) for r in _csv("report", "extrapolate", "length_diff",
                                                                           "length_diff.csv")}
    at = {b: [diff[(m, b)] for m in ("ape", "shape", "rpe")] for b in ("25-29", "20-24")}
    assert (f"e.g. {_signed(at['25-29'][0])} (APE), {_signed(at['25-29'][1])} (SHAPE), {_signed(at['25-29'][2])} (RPE) "
            f"subwords at 25–29 source subwords, " + "/".join(_signed(x) for x in at["20-24"]) + " at 20–24") in text


def test_bootstrap_and_shift_invariance_are_the_committed_files() -> None:
    """§0b's bootstrap verdicts are the regenerated report's; its shift-invariance table is the
    report written where the runs were trained (checkpoints are not committed; regenerated reports keep it)."""
    text = _section()
    for setting in ("vanilla", "extrapolate"):
        lines = (COMMITTED / "report" / setting / "bootstrap" / "bootstrap.md").read_text(encoding="utf-8").splitlines()
        # row: model, BLEU, then the verdict against ape, shape, rpe
        cells = {row[0]: row for row in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}
        assert (f"{setting.upper()}: APE {cells['ape'][3]} SHAPE, RPE {cells['rpe'][3]} SHAPE, "
                f"RPE {cells['rpe'][2]} APE.") in text, setting
    sims: dict[tuple[str, int], list[float]] = {}
    for seed in (1, 2, 3):
        path = COMMITTED / "report" / "vanilla" / "shift_invariance" / f"seed{seed}" / "shift_invariance.csv"
        for r in csv_rows(path):
            if r["k1"] == "0" and r["k2"] in ("100", "250", "500"):
                sims.setdefault((r["model"], int(r["k2"])), []).append(float(r["similarity"]))
    for model, label in (("ape", "APE"), ("shape", "SHAPE K=40")):
        cells = [f"{statistics.fmean(sims[(model, k)]):.3f} ± {statistics.stdev(sims[(model, k)]):.3f}" for k in (100, 250, 500)]
        assert f"| {label} | " + " | ".join(cells) + " |" in text, model
