"""The analysis runner on a hand-made grid part, with no task behind it: a pooled analysis runs once
on every seed, a model analysis once per seed that keeps a checkpoint (with the runs it read named
and its seeds combined), an earlier per-seed output stays only while the runs it names are
unchanged, and the runner imports no task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from posenc.analysis.grid_part import GridPart, clear_analysis_output, run_analysis
from posenc.analysis.view import CARRIED, MODELS
from posenc.errors import ConfigError
from tests.analysis.test_feeders import OPTIONS, HandMadeView

SETTING, METHODS, SEEDS = "extrapolate", ("ape", "shape"), (1, 2)


def identity(run_dir: Path) -> dict[str, Any] | None:
    """The test's own record of a finished run (no results.json: the runner reads none)."""
    path = run_dir / "done.json"
    return json.loads(path.read_text()) if path.is_file() else None


class HandMadeGrid:
    """Runs of :data:`METHODS` × :data:`SEEDS` under ``root``, each with a record and a checkpoint,
    read through views of :class:`HandMadeView` (its data and models) for the seeds asked; every
    view built is logged in :attr:`asked`."""

    def __init__(self, root: Path, full: HandMadeView) -> None:
        self.root, self.full, self.asked = root, full, []
        for method in METHODS:
            for seed in SEEDS:
                run = self.run_dir(method, seed)
                (run / "checkpoints" / "ckpt_00000010").mkdir(parents=True)
                (run / "checkpoints" / "ckpt_00000010" / "model.safetensors").write_bytes(b"")
                (run / "done.json").write_text(json.dumps({"steps": 10 * seed, "method": method}))

    def run_dir(self, method: str, seed: int) -> Path:
        return self.root / SETTING / method / f"seed{seed}"

    def view(self, seeds: list[int]) -> HandMadeView:
        self.asked.append(list(seeds))
        view = HandMadeView.__new__(HandMadeView)
        view.__dict__.update(self.full.__dict__)
        n = len(self.full.src) // len(self.full.seeds)
        view.seeds, view.src, view.ref = list(seeds), self.full.src[:n] * len(seeds), self.full.ref[:n] * len(seeds)
        return view

    def part(self, methods: tuple[str, ...] = METHODS, carries: frozenset[str] = frozenset(CARRIED)) -> GridPart:
        return GridPart(task="reversal", carries=carries, setting=SETTING, methods=list(methods), seeds=list(SEEDS),
                        run_dir=self.run_dir, view=self.view, identity=identity)

    def drop_checkpoints(self, seed: int) -> None:
        for method in METHODS:
            (self.run_dir(method, seed) / "checkpoints" / "ckpt_00000010" / "model.safetensors").unlink()


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> HandMadeView:
    return HandMadeView(tmp_path_factory.mktemp("views"))


@pytest.fixture
def grid(tmp_path: Path, full: HandMadeView) -> HandMadeGrid:
    return HandMadeGrid(tmp_path / "grid", full)


def _files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def test_a_pooled_analysis_runs_once_on_every_seed(grid: HandMadeGrid, tmp_path: Path) -> None:
    out = tmp_path / "report" / "length_bleu"
    assert run_analysis(grid.part(), "length_bleu", OPTIONS, out) == [
        "All seeds pooled (1, 2): each test sentence once per seed.", ""]
    assert grid.asked == [[1, 2]]
    assert {"length_bleu.csv", "length_bleu.png"} <= set(_files(out))
    assert not any(p.name.startswith("seed") for p in out.iterdir())


def test_a_model_analysis_runs_per_seed_naming_its_runs_and_compares_the_seeds(grid: HandMadeGrid, tmp_path: Path) -> None:
    out = tmp_path / "report" / "position_nll"
    lines = run_analysis(grid.part(), "position_nll", OPTIONS, out)
    assert lines == ["One result per seed (seed1, seed2). Compared over seeds 1, 2 in the files beside the seed "
                     "folders.", ""]
    assert grid.asked == [[1], [2]]
    for seed in SEEDS:
        assert json.loads((out / f"seed{seed}" / "runs.json").read_text()) == {
            m: {"steps": 10 * seed, "method": m} for m in METHODS}
        assert "position_nll.csv" in _files(out / f"seed{seed}")
    assert {"position_nll_seeds.csv", "position_nll_pairs.csv"} <= set(_files(out))


def test_a_seed_without_checkpoints_keeps_its_output_while_its_runs_are_unchanged(grid: HandMadeGrid, tmp_path: Path) -> None:
    out = tmp_path / "report" / "position_nll"
    run_analysis(grid.part(), "position_nll", OPTIONS, out)
    kept = (out / "seed1" / "position_nll.csv").read_text()
    (out / "stale.csv").write_text("from an earlier report\n")
    grid.drop_checkpoints(1)
    grid.asked.clear()
    clear_analysis_output(grid.part(), "position_nll", out)
    assert sorted(p.name for p in out.iterdir()) == ["seed1"]  # the combined files and stale.csv go
    lines = run_analysis(grid.part(), "position_nll", OPTIONS, out)
    assert grid.asked == [[2]] and (out / "seed1" / "position_nll.csv").read_text() == kept
    assert lines[0] == (f"One result per seed (seed2). Seed(s) 1 left out: it reads the trained models and 2 run(s) "
                        f"keep no checkpoint (e.g. `{grid.run_dir('ape', 1)}`; committed results keep none). Seed 1: "
                        "kept as the report that had its models wrote it (its runs.json names today's runs of ape, "
                        "shape). Compared over seeds 1, 2 in the files beside the seed folders.")
    (grid.run_dir("shape", 1) / "done.json").write_text(json.dumps({"steps": 11, "method": "shape"}))  # retrained
    clear_analysis_output(grid.part(), "position_nll", out)
    assert not out.exists() or not any(out.iterdir())
    lines = run_analysis(grid.part(), "position_nll", OPTIONS, out)
    assert "kept" not in lines[0] and "Compared" not in lines[0] and _files(out)
    assert sorted(p.name for p in out.iterdir()) == ["seed2"]


def test_a_model_analysis_without_any_checkpoint_is_skipped_and_says_why(grid: HandMadeGrid, tmp_path: Path) -> None:
    for seed in SEEDS:
        grid.drop_checkpoints(seed)
    lines = run_analysis(grid.part(), "shift_invariance", OPTIONS, tmp_path / "out")
    assert lines == [f"Skipped: it reads the trained models and 4 run(s) keep no checkpoint (e.g. "
                     f"`{grid.run_dir('ape', 1)}`; committed results keep none): run the report where the runs "
                     "were trained.", ""]
    assert grid.asked == [] and not (tmp_path / "out").exists()


def test_an_analysis_the_part_cannot_feed_is_skipped_or_refused(grid: HandMadeGrid, tmp_path: Path) -> None:
    assert run_analysis(grid.part(methods=("ape",)), "bootstrap", OPTIONS, tmp_path / "out") == [
        "Skipped: bootstrap compares at least 2 methods; this experiment has 1.", ""]
    with pytest.raises(ConfigError, match="^analysis position_nll does not fit the runs of task reversal: it needs"):
        run_analysis(grid.part(carries=frozenset(CARRIED) - {MODELS}), "position_nll", OPTIONS, tmp_path / "out")
    assert grid.asked == []


def test_the_runner_imports_no_task() -> None:
    code = ("import sys, posenc.analysis.grid_part; "
            "print(sorted(m for m in sys.modules if m.startswith(('posenc.tasks', 'posenc.experiments', 'posenc.runs'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
