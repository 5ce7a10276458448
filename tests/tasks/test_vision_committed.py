"""docs/results_vision.md is the committed grid (docs/results/fashion_mnist_small: the shipped
vision/fashion_mnist_small experiment, 7 methods x 3 seeds): every committed cell answers today's
config, the committed report is what the report code writes from those results, and the document's
tables and numbers are computed here from them."""

from __future__ import annotations

import statistics
from pathlib import Path

from posenc.experiments.experiment import Experiment
from posenc.tasks.vision.config import VisionExperimentConfig
from posenc.tasks.vision.report import unseen, write_summary
from tests.helpers.committed import assert_all_fresh, committed_grid, committed_results, report_rows_in

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results" / "fashion_mnist_small"
DOC = ROOT / "docs" / "results_vision.md"


def _grid() -> Experiment:
    return committed_grid(VisionExperimentConfig, "vision/fashion_mnist_small", COMMITTED)


def _results(grid: Experiment) -> list[dict]:
    return committed_results(grid)


def _univit(grid: Experiment) -> dict[str, list[int]]:
    cfgs = {cell.method: grid.run_config(cell) for cell in grid.cells()}
    return {m: list(c.univit.resolutions) if c.univit.enabled else [] for m, c in cfgs.items()}


def test_every_committed_cell_answers_the_shipped_config() -> None:
    assert_all_fresh(_grid(), 7 * 3)


def test_the_committed_report_is_the_report_of_the_committed_results(tmp_path: Path) -> None:
    grid = _grid()
    text = write_summary(grid.name, _results(grid), 28, _univit(grid), tmp_path)
    assert text == (COMMITTED / "report" / "README.md").read_text(encoding="utf-8")


def test_the_documents_table_and_numbers_are_the_committed_ones() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert report_rows_in(doc, COMMITTED / "report" / "README.md"), "the document's table is the committed report's"
    grid = _grid()
    results, univit = _results(grid), _univit(grid)

    def unseen_mean(method: str) -> float:
        runs = [r for r in results if r["method"] == method]
        at = unseen([int(k) for k in runs[0]["metrics"]["accuracy"]], 28, univit[method])
        return 100 * statistics.fmean(statistics.fmean(r["metrics"]["accuracy"][str(k)] for k in at) for r in runs)

    def at(method: str, res: int) -> float:
        return 100 * statistics.fmean(r["metrics"]["accuracy"][str(res)] for r in results if r["method"] == method)

    gain = unseen_mean("cape-2d") - unseen_mean("sinusoidal-2d")
    numbers = {"cape-2d over sinusoidal-2d at unseen resolutions": f"+{gain:.1f}",
               "learned-2d unseen": f"{unseen_mean('learned-2d'):.1f}",
               "cape-2d unseen": f"{unseen_mean('cape-2d'):.1f}",
               "cape-2d at 28 px": f"{at('cape-2d', 28):.1f}",
               "sinusoidal-2d at 28 px": f"{at('sinusoidal-2d', 28):.1f}"}
    for what, text in numbers.items():
        assert text in doc, (what, text)
