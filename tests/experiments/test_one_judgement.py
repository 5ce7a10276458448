"""One judgement per cell: ``posenc experiment`` asks the one "same run?" rule
(:func:`posenc.runs.same_run.same_run`) once per cell whatever becomes of it (re-reported, rescored,
training extended, reported only), and hands that verdict down: training resumes and the
checkpoint is loaded without judging the run again, and so is a run started and left unfinished (resumed)
or trained elsewhere (scored). A cell with nothing recorded has nothing to judge."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import posenc.runs.same_run as rules
import posenc.tasks.base as task_base
import posenc.tasks.translation.load  # noqa: F401
import posenc.tasks.translation.task  # noqa: F401  (imported before the spy: every user of the rule is patched)
from posenc.config import load_config
from posenc.errors import ConfigError
from posenc.experiments.runner import run_experiment
from posenc.tasks.translation.experiment import ExperimentConfig
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.grids import grid_of_config, verdict_now

METHODS = ("ape", "shape")


def _spy(monkeypatch: pytest.MonkeyPatch) -> Counter[Path]:
    """Every use of :func:`same_run` in posenc (wherever a module imported it), counted per run
    directory judged."""
    calls: Counter[Path] = Counter()
    judge = rules.same_run

    def spy(stored: Any, cfg: Any, evaluation: Any = None) -> rules.Verdict:
        calls[Path(cfg.out_dir).resolve()] += 1
        return judge(stored, cfg, evaluation)

    for name, module in list(sys.modules.items()):
        if name.startswith("posenc") and getattr(module, "same_run", None) is judge:
            monkeypatch.setattr(module, "same_run", spy)
    return calls


def _cells(path: Path) -> dict[Path, str]:
    """Each cell's run directory → its verdict now (None: nothing stored)."""
    grid = grid_of_config(load_config(ExperimentConfig, path))
    return {Path(grid.run_config(c).out_dir).resolve(): getattr(verdict_now(grid, c), "kind", None) for c in grid.cells()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny grid trained once (its cells then re-judged by each test, in copies)."""
    root = tmp_path_factory.mktemp("one_judgement")
    run_experiment(str(write_experiment(root, methods=METHODS)))
    return root


def _copy(trained: Path, tmp_path: Path, **changes: Any) -> Path:
    """A copy of the trained grid, its YAML rewritten with ``changes`` (write_experiment's arguments)."""
    import shutil

    shutil.copytree(trained / "exp", tmp_path / "exp", symlinks=True)
    return write_experiment(tmp_path, methods=METHODS, **changes)


def test_a_new_cell_is_judged_nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy(monkeypatch)
    path = write_experiment(tmp_path, methods=("ape",))
    run_experiment(str(path))
    monkeypatch.undo()
    assert list(_cells(path).values()) == ["fresh"]
    assert not calls  # nothing recorded before, and what it stored is not judged again


@pytest.mark.parametrize(("changes", "before"), [({}, "fresh"), ({"decode": {"beam": 3}}, "rescore"),
                                                 ({"train": {"max_steps": 4}}, "extend")])
def test_every_cell_is_judged_once(trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   changes: dict, before: str) -> None:
    path = _copy(trained, tmp_path, **changes)
    cells = _cells(path)
    assert set(cells.values()) == {before}
    calls = _spy(monkeypatch)
    run_experiment(str(path))
    monkeypatch.undo()
    assert calls == Counter(dict.fromkeys(cells, 1))
    assert set(_cells(path).values()) == {"fresh"}


def test_a_report_only_judges_each_cell_once(trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _copy(trained, tmp_path)
    calls = _spy(monkeypatch)
    run_experiment(str(path), report_only=True)
    monkeypatch.undo()
    assert calls == Counter(dict.fromkeys(_cells(path), 1))


def _unfinish(path: Path, *names: str) -> None:
    """Each cell of the grid ``path`` without ``results.json`` and the run files ``names`` (globs
    under its run directory): a run started there and left unfinished, or brought back without them."""
    import shutil

    for out in _cells(path):
        (out / "results.json").unlink()
        for name in names:
            for found in out.glob(name):
                if found.is_dir():
                    shutil.rmtree(found)
                else:
                    found.unlink()


@pytest.mark.parametrize("changes", [{}, {"train": {"max_steps": 4}}])
def test_an_interrupted_cell_is_judged_once(trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            changes: dict) -> None:
    """A grid stopped mid-training (its runs' checkpoints kept, no summary, no results) and run
    again: each started run is judged at planning, resumes with that verdict and is scored."""
    path = _copy(trained, tmp_path, **changes)
    _unfinish(path, "summary.json")
    cells = _cells(path)
    assert set(cells.values()) == {None}  # started, not finished: each has to run
    calls = _spy(monkeypatch)
    run_experiment(str(path))
    monkeypatch.undo()
    assert calls == Counter(dict.fromkeys(cells, 1))
    assert set(_cells(path).values()) == {"fresh"}
    steps = changes.get("train", {}).get("max_steps", 3)
    assert {json.loads((out / "results.json").read_text())["summary"]["steps"] for out in cells} == {steps}


def test_a_cell_trained_elsewhere_is_judged_once_and_scored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell brought back with its summary and averaged checkpoint but no resumable checkpoint
    nor results: judged once, scored as it is, never trained again."""
    path = write_experiment(tmp_path, methods=("ape",), train={"average_last": 2, "save_every": 1})
    run_experiment(str(path))
    scored = {out: json.loads((out / "results.json").read_text()) for out in _cells(path)}
    _unfinish(path, "checkpoints/ckpt_*")
    assert all((out / "checkpoints" / "average" / "model.safetensors").is_file() for out in scored)
    calls = _spy(monkeypatch)
    monkeypatch.setattr(task_base, "run_task", lambda *a, **k: pytest.fail("a run trained elsewhere was retrained"))
    run_experiment(str(path))
    monkeypatch.undo()
    assert calls == Counter(dict.fromkeys(scored, 1))
    assert set(_cells(path).values()) == {"fresh"}
    for out, before in scored.items():
        after = json.loads((out / "results.json").read_text())
        assert after["scores"] == before["scores"] and after["summary"]["steps"] == before["summary"]["steps"]
        assert not list((out / "checkpoints").glob("ckpt_*"))


def test_a_run_averaged_by_posenc_average_is_judged_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell trained elsewhere whose only checkpoint is the output of ``posenc average``: the
    average records the run, so loading it to score the cell judges nothing again."""
    from posenc.cli.main import main

    path = write_experiment(tmp_path, methods=("ape",), train={"save_every": 1})
    run_experiment(str(path))
    cells = _cells(path)
    for out in cells:
        assert not (out / "checkpoints" / "average").exists()
        assert main(["average", "--run", str(out), "--last", "2"]) == 0
    _unfinish(path, "checkpoints/ckpt_*")
    calls = _spy(monkeypatch)
    monkeypatch.setattr(task_base, "run_task", lambda *a, **k: pytest.fail("a run trained elsewhere was retrained"))
    run_experiment(str(path))
    monkeypatch.undo()
    assert calls == Counter(dict.fromkeys(cells, 1))
    assert set(_cells(path).values()) == {"fresh"}


def test_a_started_run_of_another_config_is_stale(trained: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A run started with another config and left unfinished is stale when the grid is planned
    (judged once), and refused before anything trains."""
    path = _copy(trained, tmp_path, model={"d_ff": 48})
    _unfinish(path, "summary.json")
    calls = _spy(monkeypatch)
    with pytest.raises(ConfigError, match="started with another config"):
        run_experiment(str(path))
    monkeypatch.undo()
    assert calls == Counter(dict.fromkeys(_cells(path), 1))


def _with_selection(path: Path) -> Path:
    """The tiny grid's YAML with a selection stage: SHAPE's max_shift chosen among two values."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["selection"] = {"key": "model.position.max_shift", "values": [4, 20], "method": "shape", "seeds": [1]}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_a_selection_grid_judges_each_sweep_and_test_cell_once(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep is listed for the data check and then run, and read again for the report: its
    cells and the test grid's are judged once per run of the grid all the same."""
    path = _with_selection(write_experiment(tmp_path, methods=METHODS))
    run_experiment(str(path))
    for report_only in (False, True):
        calls = _spy(monkeypatch)
        run_experiment(str(path), report_only=report_only)
        monkeypatch.undo()
        sweep = {out for out in calls if "max_shift" in out.parent.name}
        assert len(sweep) == 2 and len(calls) == 4  # two sweep cells, ape and the chosen shape
        assert set(calls.values()) == {1}, calls


def test_cells_run_by_workers_are_judged_once(trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--jobs 2``: each cell is judged once where it runs (its worker); the runner takes the
    results its worker stored as today's run, judging nothing again (here: a new cell is judged
    nowhere in the runner's process, an extended one once, before it is handed to its worker)."""
    path = _copy(trained, tmp_path, train={"max_steps": 4})
    calls = _spy(monkeypatch)
    run_experiment(str(path), jobs=2)
    monkeypatch.undo()
    assert calls == Counter(dict.fromkeys(_cells(path), 1))
    assert set(_cells(path).values()) == {"fresh"}
