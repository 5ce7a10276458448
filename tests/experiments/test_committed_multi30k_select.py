"""The committed multi30k_select grid (docs/results/multi30k_select, issue 26): the K sweep and the
EXTRAPOLATE column answer the shipped config (fresh), every run converged by the one rule, the
chosen K is the validation argmax of the committed sweep, and every number docs/results.md §0c
quotes is computed here from the committed files."""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from posenc.config import load_config
from posenc.evaluation.seeds import seed_test
from posenc.experiments.runner import find_experiment, verdict
from posenc.experiments.selection import resolved
from posenc.tasks.translation import report
from posenc.tasks.translation.config import ExperimentConfig
from posenc.tasks.translation.grid import TASK
from posenc.training.convergence import CONVERGED

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results" / "multi30k_select"
DOCS = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
SECTION = DOCS.split("## 0c.")[1].split("\n## ")[0]
METHODS = ("ape", "rpe", "shape-kstar", "shape-k500", "shape-k500-public")
SEEDS = (1, 2, 3)


def _exp() -> ExperimentConfig:
    return replace(load_config(ExperimentConfig, find_experiment("multi30k_select")), out_dir=str(COMMITTED))


def _results(root: str = "extrapolate") -> dict[tuple[str, int], dict]:
    return {(m, s): json.loads((COMMITTED / root / m / f"seed{s}" / "results.json").read_text(encoding="utf-8"))
            for m in METHODS for s in SEEDS}


def _sweep() -> dict[int, dict]:
    sel = resolved(_exp())
    return {k: json.loads((COMMITTED / "extrapolate" / sel.label(k) / "seed1" / "results.json").read_text(encoding="utf-8"))
            for k in sel.values}


def test_committed_cells_are_fresh() -> None:
    exp = _exp()
    sel = resolved(exp)
    sweep = TASK.selection_experiment(exp, sel)
    assert {c: verdict(sweep, *c).kind for c in TASK.cells(sweep)} == dict.fromkeys(TASK.cells(sweep), "fresh")
    grid = TASK.with_selection(exp, 10)
    cells = [("extrapolate", m, s) for m in METHODS for s in SEEDS]
    assert {c: verdict(grid, *c).kind for c in cells} == dict.fromkeys(cells, "fresh")


def test_every_run_converged() -> None:
    exp = _exp()
    results = [*_results().values(), *_sweep().values()]
    assert len(results) == 21
    judged = report.judged(exp, list(_results().values()))
    assert {r["judged"]["status"] for r in judged} == {CONVERGED}
    assert all(r["summary"]["stopped"] != "max_steps" for r in results)


def test_chosen_k_is_the_validation_argmax() -> None:
    sweep = _sweep()
    valid = {k: r["scores"]["valid"]["bleu"] for k, r in sweep.items()}
    assert all("test" not in r["scores"] for r in sweep.values())  # the sweep never decoded the test split
    chosen = json.loads((COMMITTED / "selection" / "selection.json").read_text(encoding="utf-8"))["chosen"]
    assert chosen == max(valid, key=valid.get) == 10
    assert "| validation BLEU | " + " | ".join((f"**{v:.2f}**" if k == chosen else f"{v:.2f}") for k, v in valid.items()) + " |" in SECTION
    assert _exp().methods["shape-kstar"]["model.position.max_shift"] != chosen  # the YAML's placeholder, replaced


@pytest.mark.parametrize("method", METHODS)
def test_docs_row_is_the_committed_bleu(method: str) -> None:
    results = _results()
    bleu = [results[(method, s)]["scores"]["test"]["bleu"] for s in SEEDS]
    quoted = f"**{statistics.fmean(bleu):.2f} ± {statistics.stdev(bleu):.2f}** ({', '.join(f'{b:.2f}' for b in bleu)})"
    row = next(line for line in SECTION.splitlines() if quoted in line)
    losses = [results[(method, s)]["summary"]["best_valid"] for s in SEEDS]
    assert row.endswith(f"| {min(losses):.3f}–{max(losses):.3f} |")
    if method != "ape":
        t = seed_test(bleu, [results[("ape", s)]["scores"]["test"]["bleu"] for s in SEEDS])
        p = f"p = {t.p:.3f}" if t.p >= 0.001 else "p < 0.001"
        assert f"| {t.diff:+.2f}, {p} |".replace("-", "−") in row
    assert {results[(method, s)]["length_penalty"]["chosen"] for s in SEEDS} == {1.4}  # the top of the α grid


def test_length_table_is_the_committed_report() -> None:
    with open(COMMITTED / "report" / "extrapolate" / "length_bleu" / "length_bleu.csv", newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["sentences"] != "0"]
    ape = [r for r in rows if r["model"] == "ape"]
    assert "| sentences (×3) | " + " | ".join(f"{int(r['sentences']):,}" for r in ape) + " |" in SECTION
    assert "| APE | " + " | ".join(f"{float(r['bleu']):.1f}" for r in ape) + " |" in SECTION
    for method, label in (("shape-kstar", "SHAPE K*"), ("shape-k500", "SHAPE K=500"), ("rpe", "RPE")):
        gains = [f"{float(r['gain']):+.1f}".replace("-", "−") for r in rows if r["model"] == method]
        assert f"| {label} − APE | " + " | ".join(gains) + " |" in SECTION, method


def test_readme_quotes_the_committed_means() -> None:
    results = _results()
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    means = [statistics.fmean(results[(m, s)]["scores"]["test"]["bleu"] for s in SEEDS) for m in ("shape-kstar", "ape", "rpe")]
    assert "(" + " / ".join(f"{m:.2f}" for m in means) + ", 3 seeds, no difference significant)" in readme
    k500 = statistics.fmean(results[("shape-k500", s)]["scores"]["test"]["bleu"] for s in SEEDS)
    assert f"K = 500 is {means[1] - k500:.1f} BLEU below APE" in readme


#: The committed VANILLA runs (the rest of the VANILLA column is not trained yet).
VANILLA = {"ape": ("APE", (1, 2)), "shape-kstar": ("SHAPE K* = 10", (1, 2))}


def _vanilla(method: str) -> list[dict]:
    return [json.loads((COMMITTED / "vanilla" / method / f"seed{s}" / "results.json").read_text(encoding="utf-8"))
            for s in VANILLA[method][1]]


def test_vanilla_runs_are_fresh_converged_and_quoted() -> None:
    grid = TASK.with_selection(_exp(), 10)
    trained = {m: sorted(int(p.parent.name[4:]) for p in (COMMITTED / "vanilla" / m).glob("seed*/results.json"))
               for m in METHODS if (COMMITTED / "vanilla" / m).is_dir()}
    assert trained == {m: list(seeds) for m, (_, seeds) in VANILLA.items()}
    text = " ".join(SECTION.split())
    for method, (label, seeds) in VANILLA.items():
        runs = _vanilla(method)
        assert all(verdict(grid, "vanilla", method, s).kind == "fresh" for s in seeds)
        assert {r["judged"]["status"] for r in report.judged(_exp(), runs)} == {CONVERGED}
        bleu = [r["scores"]["test"]["bleu"] for r in runs]
        quoted = f"{label} **{statistics.fmean(bleu):.2f} ± {statistics.stdev(bleu):.2f}** ({', '.join(f'{b:.2f}' for b in bleu)})"
        assert quoted in text, quoted
    t = seed_test([r["scores"]["test"]["bleu"] for r in _vanilla("shape-kstar")],
                  [r["scores"]["test"]["bleu"] for r in _vanilla("ape")])
    assert f"{t.diff:+.2f} BLEU, Welch p = {t.p:.2f}".replace("-", "−") in text
    ms = {m: [r["scores"]["test"]["bleu"] for r in _vanilla(m)] for m in VANILLA}
    shape, ape = (f"{statistics.fmean(ms[m]):.2f}" for m in ("shape-kstar", "ape"))
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"({shape} vs {ape}, 2 seeds each so far, p = {t.p:.2f})" in readme
    sd = {m: f"{statistics.stdev(ms[m]):.2f}" for m in ms}
    assert f"({shape} ± {sd['shape-kstar']} vs {ape} ± {sd['ape']}, p = {t.p:.2f})" in " ".join(DOCS.split())


def test_alpha_probe_beyond_the_grid_is_quoted() -> None:
    """benchmarks/alpha_probe.py's committed sweeps: α = 1.4 reproduces the run's own sweep, and
    §0c quotes every value and the largest gain over the grid's top."""
    text = " ".join(SECTION.split())
    for method, label in (("ape", "APE"), ("shape-kstar", "SHAPE K*")):
        probe = json.loads((COMMITTED / "alpha_probe" / f"vanilla-{method}-seed2.json").read_text(encoding="utf-8"))
        own = json.loads((COMMITTED / "vanilla" / method / "seed2" / "results.json").read_text(encoding="utf-8"))
        assert probe["sweep"]["1.4"] == own["length_penalty"]["sweep"]["1.4"]  # same model, same decoding
        assert " / ".join(f"{v:.2f}" for v in probe["sweep"].values()) + f" for {label}" in text
        gain = max(probe["sweep"].values()) - probe["sweep"]["1.4"]
        assert f"{gain:.2f} ({label})" in text
