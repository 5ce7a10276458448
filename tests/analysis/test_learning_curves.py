"""Learning curves carry each run's status by the one convergence rule; a run without one is
"unknown", never drawn as converged."""

from __future__ import annotations

import math
from pathlib import Path

from posenc.analysis.learning_curves import learning_curves, method_of, seed_index


def test_statuses_in_the_table_and_unknown_by_default(tmp_path: Path) -> None:
    rows = [{"step": 100.0, "ppl": 3.0, "wall_s": 1.0}, {"step": 200.0, "ppl": 2.0, "wall_s": 2.0}]
    out = learning_curves({"ape/seed1": rows, "rpe/seed1": rows}, {"ape/seed1": "still improving"}, tmp_path)
    table = (out / "curves.md").read_text(encoding="utf-8")
    assert "| ape/seed1 | 2 | 200 | 2.0 | 2.0 | – | still improving |" in table  # 2 validations: no slope
    assert "| rpe/seed1 | 2 | 200 | 2.0 | 2.0 | – | unknown |" in table
    assert "stopped by patience before the step cap, with the best validation after warm-up and a flat end" in table
    assert (out / "learning_curves.png").is_file()


def test_end_slope_column_is_the_fit_of_the_last_losses(tmp_path: Path) -> None:
    # loss falls 0.01 nats per 100 updates: -0.1 nats per 1,000 updates, exactly on a line
    rows = [{"step": float(s), "loss": 2.0 - 0.0001 * s, "ppl": math.exp(2.0 - 0.0001 * s), "wall_s": s / 10}
            for s in range(100, 1300, 100)]
    out = learning_curves({"shape/seed2": rows}, {"shape/seed2": "not flat"}, tmp_path)
    assert "| shape/seed2 | 12 | 1200 | 6.554 | 6.554 | -0.1000 ± 0.0000 | not flat |" in (out / "curves.md").read_text()


def test_colour_by_method_style_by_seed() -> None:
    assert [method_of(n) for n in ("ape/seed1", "shape-k4/seed12", "toy")] == ["ape", "shape-k4", "toy"]
    assert [seed_index(n) for n in ("ape/seed1", "ape/seed3", "toy")] == [0, 2, 0]
