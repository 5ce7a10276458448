"""docs/results_speech.md is the committed grid (docs/results/fsdd_small: the shipped
speech/fsdd_small experiment, 5 methods x 3 seeds): every committed cell answers today's config,
the committed report is what the report code writes from those results, and the document's table
and numbers are computed here from them."""

from __future__ import annotations

import statistics
from pathlib import Path

from posenc.experiments.experiment import Experiment
from posenc.tasks.speech.config import SpeechExperimentConfig
from posenc.tasks.speech.report import write_summary
from tests.helpers.committed import assert_all_fresh, committed_grid, committed_results, report_rows_in

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results" / "fsdd_small"
DOC = ROOT / "docs" / "results_speech.md"
UNSEEN = ("4s", "8s", "16s")


def _grid() -> Experiment:
    return committed_grid(SpeechExperimentConfig, "speech/fsdd_small", COMMITTED)


def _results(grid: Experiment) -> list[dict]:
    return committed_results(grid)


def _wer(result: dict, bucket: str) -> float:
    return next(float(r["wer"]) for r in result["metrics"]["rows"] if r["bucket"] == bucket)


def test_every_committed_cell_answers_the_shipped_config() -> None:
    assert_all_fresh(_grid(), 5 * 3)


def test_the_committed_report_is_the_report_of_the_committed_results(tmp_path: Path) -> None:
    grid = _grid()
    text = write_summary(grid.name, _results(grid), 2.0, tmp_path)
    assert text == (COMMITTED / "report" / "README.md").read_text(encoding="utf-8")


def test_the_documents_table_and_numbers_are_the_committed_ones() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert report_rows_in(doc, COMMITTED / "report" / "README.md"), "the document's table is the committed report's"
    results = _results(_grid())
    unseen = {m: statistics.fmean(statistics.fmean(_wer(r, b) for b in UNSEEN) for r in results if r["method"] == m)
              for m in ("rpe", "sinusoidal", "learned", "nopos", "cape")}
    quoted = ("the WER was {rpe:.1f} % for rpe, {sinusoidal:.1f} % for\nsinusoidal, {learned:.1f} % for learned, "
              "{nopos:.1f} % for nopos and {cape:.1f} % for CAPE").format(**unseen)
    assert quoted in doc
    best = [min((_wer(r, b), r["method"]) for r in results if r["seed"] == s)[1] for s in (0, 1, 2) for b in UNSEEN]
    assert best == ["rpe"] * 9 and "in every seed (9 of 9)" in doc
