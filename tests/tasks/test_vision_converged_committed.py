"""docs/results_vision.md's "Trained to a validation plateau" section is the committed grid
docs/results/fashion_mnist_converged (the shipped vision/fashion_mnist_converged experiment: the
4 single-resolution methods x 3 seeds, stopped by validation patience): every committed cell answers
today's config, each run's stop and status are the convergence rule's on its own validation curve,
the committed report is what the report code writes, and the numbers the documents quote are
computed here from the committed results (and, for the comparison, from fashion_mnist_small's)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from posenc.experiments.experiment import Experiment
from posenc.tasks.vision.config import VisionExperimentConfig
from posenc.tasks.vision.report import unseen, write_summary
from posenc.training.config import TrainConfig
from posenc.training.state import TrainState
from posenc.training.stopping import record_validation
from tests.helpers.committed import (
    assert_all_fresh,
    assert_document_quotes,
    assert_status_is_the_rules,
    committed_grid,
    committed_results,
    stops_of,
    valid_history,
)
from tests.helpers.grids import results_file

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results" / "fashion_mnist_converged"
SMALL = ROOT / "docs" / "results" / "fashion_mnist_small"
DOC = ROOT / "docs" / "results_vision.md"
SUMMARY_DOC = ROOT / "docs" / "results.md"
METHODS = ("learned-2d", "sinusoidal-2d", "cape-2d", "none")
SEEDS = (0, 1, 2)
TRAIN_RES = 28


def _grid() -> Experiment:
    return committed_grid(VisionExperimentConfig, "vision/fashion_mnist_converged", COMMITTED)


def _small_results() -> list[dict]:
    return committed_results(committed_grid(VisionExperimentConfig, "vision/fashion_mnist_small", SMALL))


def _at(results: list[dict], method: str, res: int) -> list[float]:
    """Per-seed accuracy (%) of ``method`` at ``res`` px."""
    return [100 * r["metrics"]["accuracy"][str(res)] for r in results if r["method"] == method]


def _unseen(results: list[dict], method: str) -> list[float]:
    """Per-seed mean accuracy (%) over the resolutions other than 28 px."""
    runs = [r for r in results if r["method"] == method]
    at = unseen([int(k) for k in runs[0]["metrics"]["accuracy"]], TRAIN_RES, None)
    return [100 * statistics.fmean(r["metrics"]["accuracy"][str(k)] for k in at) for r in runs]


def test_every_committed_cell_answers_the_shipped_config() -> None:
    grid = _grid()
    assert [(c.method, c.seed) for c in grid.cells()] == [(m, s) for m in METHODS for s in SEEDS]
    assert_all_fresh(grid, len(METHODS) * len(SEEDS))


def test_every_run_stopped_by_patience_before_its_cap_and_its_status_is_the_rules() -> None:
    """Stopped by patience below the 40-epoch cap; the recorded status is the convergence rule's
    on the run's own valid.csv (recomputed here, not read back)."""
    grid = _grid()
    for cell in grid.cells():
        run = results_file(grid, cell).parent
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        cfg = grid.run_config(cell)
        assert summary["stopped"] == "patience" and summary["epochs"] < cfg.train.max_epochs, run
        assert_status_is_the_rules(run, summary, None)


def test_the_committed_report_is_the_report_of_the_committed_results(tmp_path: Path) -> None:
    grid = _grid()
    text = write_summary(grid.name, committed_results(grid), TRAIN_RES, {m: [] for m in METHODS}, tmp_path)
    assert text == (COMMITTED / "report" / "README.md").read_text(encoding="utf-8")


def _mean(values: list[float]) -> str:
    return f"{statistics.fmean(values):.1f}"


def _signed(values: list[float]) -> str:
    return ", ".join(f"{v:+.1f}" for v in values)


def stop_row(method: str, runs: list[dict]) -> str:
    """The section's row of ``method``: per seed, updates, full epochs, best validation loss, lr at
    the stop (% of the peak) and training seconds."""
    cells = [[str(r["steps"]) for r in runs], [str(r["epochs"]) for r in runs],
             [f"{r['best_valid']:.3f}" for r in runs], [f"{100 * r['lr_at_stop']:.0f}" for r in runs],
             [f"{r['wall_s']:.0f}" for r in runs]]
    return f"| {method} | " + " | ".join("/".join(c) for c in cells) + " |"


def _claims() -> dict[str, str]:
    """Every number the section and the claims row quote, as the documents write it."""
    grid = _grid()
    conv, small, stops = committed_results(grid), _small_results(), stops_of(grid)
    gain = [c - s for c, s in zip(_unseen(conv, "cape-2d"), _unseen(conv, "sinusoidal-2d"))]
    small_gain = [c - s for c, s in zip(_unseen(small, "cape-2d"), _unseen(small, "sinusoidal-2d"))]
    vs_learned = [c - s for c, s in zip(_unseen(conv, "cape-2d"), _unseen(conv, "learned-2d"))]
    claims = {f"{m} at 28 px": f"{m} {_mean(_at(conv, m, TRAIN_RES))} %" for m in METHODS}
    claims |= {f"{m} unseen": f"{m} {_mean(_unseen(conv, m))} %" for m in METHODS}
    claims |= {f"{m} stops": stop_row(m, runs) for m, runs in stops.items()}
    lrs = [r["lr_at_stop"] for runs in stops.values() for r in runs]
    walls = [r["wall_s"] for runs in stops.values() for r in runs]
    claims |= {"cape-2d over sinusoidal-2d, unseen": f"+{statistics.fmean(gain):.1f} points ({_signed(gain)})",
               "the same at 3 epochs": f"+{statistics.fmean(small_gain):.1f} ({_signed(small_gain)})",
               "cape-2d minus learned-2d, unseen":
                   f"{statistics.fmean(vs_learned):+.1f} points ({_signed(vs_learned)})",
               "cape-2d at 28 px at 3 epochs": f"{_mean(_at(small, 'cape-2d', TRAIN_RES))} %",
               "cape-2d 28 px gap to sinusoidal-2d":
                   f"{gap_at_28(conv, 'sinusoidal-2d'):.1f} points below sinusoidal-2d",
               "the same at 3 epochs, 28 px": f"{gap_at_28(small, 'sinusoidal-2d'):.1f} at 3 epochs",
               "lr at the stop": f"{100 * min(lrs):.0f}–{100 * max(lrs):.0f} % of the peak",
               "training time": f"{min(walls):.0f}–{max(walls):.0f} s of training per run",
               "converged": f"{sum(r['status'] == 'converged' for runs in stops.values() for r in runs)} of 12"}
    return claims | _comparisons(conv, small, stops)


def _comparisons(conv: list[dict], small: list[dict], stops: dict[str, list[dict]]) -> dict[str, str]:
    """The section's derived numbers: gaps, ranges and the 3-epoch counterparts."""
    mean = statistics.fmean
    small_vs_learned = mean(_unseen(small, "cape-2d")) - mean(_unseen(small, "learned-2d"))
    tta_gap = {m: mean(_at(conv, m, TRAIN_RES)) - 100 * mean(r["metrics"]["tta"] for r in conv if r["method"] == m)
               for m in METHODS}
    close = [tta_gap[m] for m in ("cape-2d", "learned-2d", "none")]
    valid = {m: [r["best_valid"] for r in stops[m]] for m in ("cape-2d", "sinusoidal-2d")}
    cape_steps = [r["steps"] for r in stops["cape-2d"]]
    return {"cape-2d 28 px gap to learned-2d": f"{gap_at_28(conv, 'learned-2d'):.1f} points below learned-2d",
            "sinusoidal-2d unseen at 3 epochs": f"{_mean(_unseen(small, 'sinusoidal-2d'))} % at 3 epochs",
            "cape-2d unseen gain":
                f"gains {mean(_unseen(conv, 'cape-2d')) - mean(_unseen(small, 'cape-2d')):.1f} points",
            "cape-2d minus learned-2d at 3 epochs": f"{small_vs_learned:+.1f} at 3 epochs",
            "TTA gaps": f"{min(close):.1f}–{max(close):.1f} points for cape-2d, learned-2d and none, "
                        f"and by {tta_gap['sinusoidal-2d']:.1f} for sinusoidal-2d",
            "best validation losses": f"({min(valid['cape-2d']):.3f}–{max(valid['cape-2d']):.3f} against "
                                      f"{min(valid['sinusoidal-2d']):.3f}–{max(valid['sinusoidal-2d']):.3f})",
            "cape-2d stop range": f"over {min(cape_steps):,}–{max(cape_steps):,} updates"}


def test_the_sections_orderings_are_the_committed_ones() -> None:
    """The section's statements that are orderings, not numbers."""
    grid = _grid()
    conv, stops = committed_results(grid), stops_of(grid)
    at28 = {m: statistics.fmean(_at(conv, m, TRAIN_RES)) for m in METHODS}
    assert sorted(at28, key=at28.get, reverse=True) == ["sinusoidal-2d", "learned-2d", "cape-2d", "none"]
    ahead = [res for res in (12, 16, 20, 24, 32, 36, 40, 48)
             if statistics.fmean(_at(conv, "cape-2d", res)) > statistics.fmean(_at(conv, "learned-2d", res))]
    assert ahead == [16, 24]
    per_seed = [c - s for c, s in zip(_unseen(conv, "cape-2d"), _unseen(conv, "learned-2d"))]
    assert all(d < 0 for d in per_seed)  # "the learned table is ahead in every seed"
    text = " ".join((ROOT / "docs" / "results_vision.md").read_text(encoding="utf-8").split())
    gaps = sorted(-d for d in per_seed)
    assert f"ahead in every seed, by {gaps[0]:.1f} to {gaps[-1]:.1f} points" in text
    unseen = statistics.fmean(_unseen(conv, "learned-2d")) / 100
    se = 100 * (unseen * (1 - unseen) / 2000) ** 0.5
    assert f"(≈ {se:.1f} points at {100 * unseen:.0f} %)" in text and gaps[-1] > se > gaps[0]
    runs = [r for rs in stops.values() for r in rs]
    lowest_lr = min(runs, key=lambda r: r["lr_at_stop"])
    assert lowest_lr is stops["cape-2d"][0] and lowest_lr["steps"] == max(r["steps"] for r in runs)
    assert lowest_lr["best_valid"] == min(r["best_valid"] for r in stops["cape-2d"])
    spread = {m: max(r["steps"] for r in rs) - min(r["steps"] for r in rs) for m, rs in stops.items()}
    assert max(spread, key=spread.get) == "cape-2d"
    tta = {m: statistics.fmean(r["metrics"]["tta"] for r in conv if r["method"] == m) for m in METHODS}
    assert all(100 * tta[m] < at28[m] for m in METHODS)


def gap_at_28(results: list[dict], other: str) -> float:
    """Mean accuracy (%) of ``other`` minus cape-2d's at 28 px."""
    return statistics.fmean(_at(results, other, TRAIN_RES)) - statistics.fmean(_at(results, "cape-2d", TRAIN_RES))


def test_the_documents_tables_and_numbers_are_the_committed_ones() -> None:
    assert_document_quotes(DOC, COMMITTED, _claims())


def test_the_claims_row_and_section_3_quote_the_committed_grid() -> None:
    """docs/results.md: the CAPE §5.1 claims row and the §3 vision paragraph."""
    text = SUMMARY_DOC.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| CAPE, §5.1"))
    claims = _claims()
    for what in ("cape-2d unseen", "learned-2d unseen", "cape-2d over sinusoidal-2d, unseen", "converged",
                 "cape-2d minus learned-2d, unseen"):
        assert claims[what] in row, (what, claims[what])
    section = " ".join(text[text.index("### Vision: Fashion-MNIST"):text.index("### Speech: FSDD")].split())
    for what in ("cape-2d at 28 px", "cape-2d 28 px gap to sinusoidal-2d", "cape-2d unseen", "learned-2d unseen",
                 "cape-2d over sinusoidal-2d, unseen", "converged"):
        assert claims[what] in section, (what, claims[what])


def _patience_stop(history: list[list[float]], cfg: TrainConfig) -> tuple[int, float]:
    """(update, best loss) at which the trainer's patience rule would stop on ``history``."""
    state = TrainState()
    for step, loss in history:
        state.step = int(step)
        if record_validation(state, loss, cfg):
            return state.step, float(state.best_valid)
    raise AssertionError("patience never ran out")


def test_the_pilots_lesson_holds_on_the_committed_cape_curve() -> None:
    """cape-2d seed 0's committed curve: patience 4 alone stops at 1,040 (best 0.531); the shipped
    rule stops where the run did, and the loss fell to 0.455 at update 1,960 in between."""
    grid = _grid()
    cell = next(c for c in grid.cells() if (c.method, c.seed) == ("cape-2d", 0))
    history, shipped = valid_history(results_file(grid, cell).parent), grid.run_config(cell).train
    naive = TrainConfig(max_epochs=shipped.max_epochs, patience=4, min_delta=shipped.min_delta)
    step, best = _patience_stop(history, naive)
    assert (step, f"{best:.3f}") == (1040, "0.531")
    assert _patience_stop(history, shipped)[0] == history[-1][0] == 2200
    assert min(history, key=lambda p: p[1]) == [1960, pytest.approx(0.455, abs=5e-4)]
    doc = " ".join(DOC.read_text(encoding="utf-8").split())
    assert "stopped it after 1,040 updates (best 0.531), while the loss went on to 0.455 at update 1,960" in doc
