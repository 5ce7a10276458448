"""A finished cell's identity (experiments/cell.run_identity), any task's: what its results.json
records of the run (its fingerprint, where its training ended), the same when only its scoring
changes, another when the run does."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc.experiments.cell import run_identity
from posenc.runs.same_run import RunRecord


@dataclass
class Run:
    width: int = 4


def _finish(run_dir: Path, cfg: Run, steps: int = 10, scores: float = 0.5,
            evaluation: dict[str, Any] | None = None) -> None:
    """``run_dir/results.json`` as a grid writes it for a cell of ``cfg``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    results = {"summary": {"steps": steps, "best_step": steps - 2}, "scores": {"test": scores},
               "record": RunRecord.of(cfg, evaluation).to_dict()}
    (run_dir / "results.json").write_text(json.dumps(results), encoding="utf-8")


def test_a_cell_without_results_has_no_identity(tmp_path: Path) -> None:
    assert run_identity(tmp_path) is None


def test_the_identity_is_the_runs_not_its_scoring(tmp_path: Path) -> None:
    _finish(tmp_path, Run())
    identity = run_identity(tmp_path)
    assert identity == {"fingerprint": RunRecord.of(Run()).fingerprint, "steps": 10, "best_step": 8}
    _finish(tmp_path, Run(), scores=0.7, evaluation={"beam": 4})  # rescored: the same run
    assert run_identity(tmp_path) == identity
    _finish(tmp_path, Run(), steps=12)  # trained further
    assert run_identity(tmp_path) != identity
    _finish(tmp_path, Run(width=8))  # another run
    assert run_identity(tmp_path) != identity
