"""Learning curves carry each run's status by the one convergence rule; a run without one is
"unknown", never drawn as converged."""

from __future__ import annotations

from pathlib import Path

from posenc.analysis.learning_curves import learning_curves


def test_statuses_in_the_table_and_unknown_by_default(tmp_path: Path) -> None:
    rows = [{"step": 100.0, "ppl": 3.0, "wall_s": 1.0}, {"step": 200.0, "ppl": 2.0, "wall_s": 2.0}]
    out = learning_curves({"ape/seed1": rows, "rpe/seed1": rows}, {"ape/seed1": "still improving"}, tmp_path)
    table = (out / "curves.md").read_text(encoding="utf-8")
    assert "| ape/seed1 | 2 | 200 | 2.0 | 2.0 | still improving |" in table
    assert "| rpe/seed1 | 2 | 200 | 2.0 | 2.0 | unknown |" in table
    assert "stopped by patience with the best validation after warm-up" in table
    assert (out / "learning_curves.png").is_file()
