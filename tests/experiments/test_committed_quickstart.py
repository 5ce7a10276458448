"""The committed quickstart run (docs/results/quickstart) answers the shipped
config, and every number README.md and docs/results.md §0 quote about it is read from its files."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

from posenc.config import load_config
from posenc.experiments.runner import find_experiment
from posenc.tasks.translation.experiment import ExperimentConfig
from tests.helpers.grids import grid_of_config, verdict_now

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results" / "quickstart"
METHODS = ("ape", "shape", "shape-k4", "rpe")


def _results() -> dict[str, dict]:
    return {m: json.loads((COMMITTED / "extrapolate" / m / "seed1" / "results.json").read_text(encoding="utf-8"))
            for m in METHODS}


def _flat(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


def test_every_committed_cell_is_fresh_and_converged() -> None:
    grid = grid_of_config(replace(load_config(ExperimentConfig, find_experiment("quickstart")), out_dir=str(COMMITTED)))
    assert {verdict_now(grid, cell).kind for cell in grid.cells()} == {"fresh"} and len(grid.cells()) == 4
    assert {r["summary"]["status"] for r in _results().values()} == {"converged"}


def test_readme_quotes_the_committed_run() -> None:
    res, readme = _results(), _flat(ROOT / "README.md")
    b = {m: f"{r['scores']['test']['bleu']:.2f}" for m, r in res.items()}
    assert f"test BLEU APE {b['ape']}, SHAPE K = 40 {b['shape']}, SHAPE K = 4 {b['shape-k4']}, RPE {b['rpe']}" in readme
    steps = sorted(r["summary"]["steps"] for r in res.values())
    assert f"all four runs converged after {steps[0]:,}–{steps[-1]:,} updates" in readme


def test_the_quoted_time_is_the_committed_measurement() -> None:
    """README's and §0's time of `make quickstart` from a fresh clone are docs/perf/quickstart_time.json's,
    whose per-run training times are the committed runs' own."""
    timing = json.loads((ROOT / "docs" / "perf" / "quickstart_time.json").read_text(encoding="utf-8"))
    wall, cpu = round(timing["wall_s"] / 60), round((timing["user_s"] + timing["system_s"]) / 60)
    readme, doc = _flat(ROOT / "README.md"), _flat(ROOT / "docs" / "results.md")
    assert f"({cpu} CPU-minutes: see below)" in readme
    assert f"It took {wall} min of wall time including the install, {cpu} min of CPU time" in readme
    assert f"{wall} min of wall time with the install, {cpu} min of CPU time" in doc
    assert timing["fresh_clone"] and timing["train_wall_s"] == {m: r["summary"]["wall_s"] for m, r in _results().items()}


def _similarities() -> dict[str, dict[int, float]]:
    path = COMMITTED / "report" / "extrapolate" / "shift_invariance" / "seed1" / "shift_invariance.csv"
    out: dict[str, dict[int, float]] = {}
    for row in csv.DictReader(path.open(encoding="utf-8")):
        if row["k1"] == "0":
            out.setdefault(row["model"], {})[int(row["k2"])] = float(row["similarity"])
    return out


def test_results_md_section_0_is_the_committed_run() -> None:
    res, doc = _results(), (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for m, r in res.items():
        s, t = r["summary"], r["scores"]["test"]
        bp = t["bleu_text"].split("BP = ")[1].split()[0]
        row = (f" | {t['bleu']:.2f} | {bp} | {s['status']} ({s['stopped']}) | {s['steps']:,} ({s['best_step']:,}) | "
               f"{s['valid_slope']:+.4f} ± {s['valid_slope_se']:.4f} | {s['params']:,} |")
        assert row in doc, m
    sim = _similarities()
    for m in METHODS:
        assert " | ".join(f"{sim[m][k]:.3f}" for k in (4, 10, 20, 40, 100, 250, 500)) in doc, m


SELECT = ROOT / "docs" / "results" / "quickstart_select"


def test_quickstart_select_chose_the_validation_argmax_and_the_docs_quote_it() -> None:
    """K* is the argmax of the validation sweep (never test), and docs/results.md §0 quotes the
    committed sweep, the chosen α per run and the test BLEU."""
    sel = json.loads((SELECT / "selection" / "selection.json").read_text(encoding="utf-8"))
    best = max(sel["rows"], key=lambda r: r["mean"])
    assert sel["chosen"] == best["value"] == 2
    doc = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert "| validation BLEU | " + " | ".join(f"{r['mean']:.2f}" for r in sel["rows"]) + " |" in doc
    for method in ("ape", "shape-kstar", "shape-k40", "rpe"):
        r = json.loads((SELECT / "extrapolate" / method / "seed1" / "results.json").read_text(encoding="utf-8"))
        lp = r["length_penalty"]
        chosen = max(lp["sweep"].items(), key=lambda kv: kv[1])  # ties: the first listed
        assert float(chosen[0]) == lp["chosen"] and lp["split"] == "valid"
        assert f"| {r['scores']['test']['bleu']:.2f} | {lp['chosen']} ({lp['sweep']['0.6']:.2f} → {chosen[1]:.2f}) |" in doc


def test_the_second_float_path_converged_the_same_config() -> None:
    """docs/perf/quickstart_float_paths.json: the quickstart under ATEN_CPU_CAPABILITY=default, the
    same runs by identity as the committed ones (same fingerprints), all four converged; README quotes it."""
    record = json.loads((ROOT / "docs" / "perf" / "quickstart_float_paths.json").read_text(encoding="utf-8"))
    runs, res = record["runs"], _results()
    assert set(runs) == set(METHODS) and "ATEN_CPU_CAPABILITY=default" in record["command"]
    assert all(runs[m]["fingerprint"] == res[m]["record"]["fingerprint"] for m in METHODS)
    assert {r["status"] for r in runs.values()} == {"converged"} and {r["stopped"] for r in runs.values()} == {"patience"}
    steps = sorted(r["steps"] for r in runs.values())
    bleu = " / ".join(f"{runs[m]['test_bleu']:.2f}" for m in METHODS)
    assert (f"with `ATEN_CPU_CAPABILITY=default` all four runs converged too, after {steps[0]:,}–{steps[-1]:,} "
            f"updates (BLEU {bleu};") in _flat(ROOT / "README.md")


def test_the_rerun_at_todays_code_gave_the_committed_runs_bit_for_bit() -> None:
    """docs/perf/quickstart_after_refactor.json: the quickstart rerun on the same machine and float
    path after the code changed under it; its test translations hash to the committed ones' sha256,
    and its BLEU and steps are the committed runs'. README says so."""
    import hashlib

    record = json.loads((ROOT / "docs" / "perf" / "quickstart_after_refactor.json").read_text(encoding="utf-8"))
    runs, res = record["runs"], _results()
    assert set(runs) == set(METHODS)
    for m in METHODS:
        hyp = COMMITTED / "extrapolate" / m / "seed1" / "translations" / "test.beam4.hyp"
        assert runs[m]["test_hyp_sha256"] == hashlib.sha256(hyp.read_bytes()).hexdigest()
        assert runs[m]["test_hyp_identical_to_committed"] and runs[m]["valid_curve_identical_to_committed"]
        assert runs[m]["test_bleu"] == res[m]["scores"]["test"]["bleu"] and runs[m]["steps"] == res[m]["summary"]["steps"]
    assert "test translations byte for byte (`docs/perf/quickstart_after_refactor.json`)" in _flat(ROOT / "README.md")
