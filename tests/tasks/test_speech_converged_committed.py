"""docs/results_speech.md's "Trained to a validation plateau" section is the committed grid
docs/results/fsdd_converged (the shipped speech/fsdd_converged experiment: 5 methods x 3 seeds,
stopped by validation patience on held-out utterances of <= 2 s): every committed cell answers
today's config, each run's stop and status are the convergence rule's on its own validation curve,
the committed report is what the report code writes, and the numbers the documents quote are
computed here from the committed results (and, for the comparison, from fsdd_small's)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from posenc.experiments.experiment import Experiment
from posenc.tasks.speech.config import SpeechExperimentConfig
from posenc.tasks.speech.report import write_summary
from tests.helpers.committed import (
    assert_all_fresh,
    assert_document_quotes,
    assert_status_is_the_rules,
    committed_grid,
    committed_results,
    stops_of,
)
from tests.helpers.grids import results_file

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results" / "fsdd_converged"
SMALL = ROOT / "docs" / "results" / "fsdd_small"
DOC = ROOT / "docs" / "results_speech.md"
SUMMARY_DOC = ROOT / "docs" / "results.md"
METHODS = ("sinusoidal", "cape", "learned", "rpe", "nopos")
SEEDS = (0, 1, 2)
UNSEEN = ("4s", "8s", "16s")


def _grid() -> Experiment:
    return committed_grid(SpeechExperimentConfig, "speech/fsdd_converged", COMMITTED)


def _small_results() -> list[dict]:
    return committed_results(committed_grid(SpeechExperimentConfig, "speech/fsdd_small", SMALL))


def _wer(result: dict, bucket: str) -> float:
    return next(float(r["wer"]) for r in result["metrics"]["rows"] if r["bucket"] == bucket)


def _unseen(results: list[dict], method: str) -> list[float]:
    """Per-seed WER (%) of ``method``, the mean over the 4, 8 and 16 s buckets."""
    return [statistics.fmean(_wer(r, b) for b in UNSEEN) for r in results if r["method"] == method]


def _bucket(results: list[dict], method: str, bucket: str) -> float:
    """Mean WER (%) over seeds of ``method`` on ``bucket``."""
    return statistics.fmean(_wer(r, bucket) for r in results if r["method"] == method)


def test_every_committed_cell_answers_the_shipped_config() -> None:
    grid = _grid()
    assert [(c.method, c.seed) for c in grid.cells()] == [(m, s) for m in METHODS for s in SEEDS]
    assert_all_fresh(grid, len(METHODS) * len(SEEDS))


def test_every_runs_stop_and_status_are_the_rules() -> None:
    """Each run stopped by patience below the max_steps cap or at the cap; the recorded status is the
    convergence rule's on the run's own valid.csv (recomputed here, not read back)."""
    grid = _grid()
    for cell in grid.cells():
        run = results_file(grid, cell).parent
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        cap = grid.run_config(cell).train.max_steps
        assert (summary["stopped"], summary["steps"] < cap) in {("patience", True), ("max_steps", False)}, run
        assert_status_is_the_rules(run, summary, cap)


def test_the_committed_report_is_the_report_of_the_committed_results(tmp_path: Path) -> None:
    grid = _grid()
    text = write_summary(grid.name, committed_results(grid), 2.0, tmp_path)
    assert text == (COMMITTED / "report" / "README.md").read_text(encoding="utf-8")


def stop_row(method: str, runs: list[dict]) -> str:
    """The section's row of ``method``: per seed, the stop (patience or cap), updates, best validation
    loss and its update, lr at the stop (% of the peak) and training seconds."""
    cells = [["cap" if r["stopped"] == "max_steps" else r["stopped"] for r in runs], [str(r["steps"]) for r in runs],
             [f"{r['best_valid']:.3f}" for r in runs],
             [str(r["best_step"]) for r in runs], [f"{100 * r['lr_at_stop']:.0f}" for r in runs],
             [f"{r['wall_s']:.0f}" for r in runs]]
    return f"| {method} | " + " | ".join("/".join(c) for c in cells) + " |"


def _claims() -> dict[str, str]:
    """Every number the section and the claims row quote, as the documents write it."""
    grid = _grid()
    conv, small, stops = committed_results(grid), _small_results(), stops_of(grid)
    claims = {f"{m} unseen": f"{m} {statistics.fmean(_unseen(conv, m)):.1f} %" for m in METHODS}
    claims |= {f"{m} unseen at 500": f"{m} {statistics.fmean(_unseen(small, m)):.1f} %" for m in METHODS}
    claims |= {f"{m} 1s": f"{m} {_bucket(conv, m, '1s'):.1f} %" for m in METHODS}
    claims |= {f"{m} stops": stop_row(m, runs) for m, runs in stops.items()}
    runs = [r for rs in stops.values() for r in rs]
    lrs, walls, steps = ([r[k] for r in runs] for k in ("lr_at_stop", "wall_s", "steps"))
    claims |= {"lr at the stop": f"{100 * min(lrs):.0f}–{100 * max(lrs):.0f} % of the peak",
               "training time": f"{min(walls):.0f}–{max(walls):.0f} s of training per run",
               "updates": f"{min(steps):,}–{max(steps):,} updates",
               "converged": f"{sum(r['status'] == 'converged' for r in runs)} of {len(runs)}"}
    nopos = [f"{v:.1f}" for v in _unseen(conv, "nopos")]
    absolute = ("sinusoidal", "learned", "cape", "nopos")
    at16, at1 = ([_bucket(conv, m, b) for m in absolute] for b in ("16s", "1s"))
    gap = statistics.fmean(_unseen(small, "cape")) - statistics.fmean(_unseen(small, "sinusoidal"))
    claims |= {"nopos per seed": f"{nopos[0]}, {nopos[1]} and {nopos[2]} %",
               "16 s range": f"is {min(at16):.0f}–{max(at16):.0f} %, "
                             f"against {min(at1):.1f}–{max(at1):.1f} % at 1 s",
               "cape 500-update gap": f"cape was {gap:.1f} points behind"}
    return claims


def test_the_documents_tables_and_numbers_are_the_committed_ones() -> None:
    assert_document_quotes(DOC, COMMITTED, _claims())


def test_the_claims_row_quotes_the_committed_grid() -> None:
    """docs/results.md: the CAPE §5.2 claims row."""
    row = next(line for line in SUMMARY_DOC.read_text(encoding="utf-8").splitlines()
               if line.startswith("| CAPE, §5.2"))
    claims = _claims()
    for what in ("cape unseen", "sinusoidal unseen", "rpe unseen", "converged"):
        assert claims[what] in row, (what, claims[what])

