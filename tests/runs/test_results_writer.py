"""``results.json`` is a file of the run: :meth:`posenc.runs.run.Run.write_results` is its one
writer, and the grid runner stores every cell's results through it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from posenc.experiments.runner import run_experiment
from posenc.runs.run import RESULTS_NAME, Run

SRC = Path(__file__).resolve().parents[2] / "src" / "posenc"
#: Calls that write a file's contents (moving a whole run directory into place writes none).
WRITERS = {"atomic_write_text", "atomic_write_bytes", "write_text", "write_bytes", "dump", "copy", "copyfile", "copy2"}


def _names_results(node: ast.AST) -> bool:
    """Whether ``node`` names the results file (the literal, :data:`RESULTS_NAME` or a ``results_path``)."""
    return any(isinstance(n, ast.Constant) and n.value == RESULTS_NAME
               or isinstance(n, (ast.Name, ast.Attribute)) and getattr(n, "id", getattr(n, "attr", "")) in
               ("RESULTS_NAME", "results_path")
               for n in ast.walk(node))


def _writes(node: ast.AST) -> bool:
    """Whether ``node`` calls a file writer, or ``open`` for writing."""
    for n in ast.walk(node):
        if not isinstance(n, ast.Call):
            continue
        name = getattr(n.func, "id", getattr(n.func, "attr", ""))
        mode = [a.value for a in n.args[1:2] if isinstance(a, ast.Constant)]
        mode += [k.value.value for k in n.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
        if name in WRITERS or name == "open" and any(c in str(m) for m in mode for c in "wax+"):
            return True
    return False


def _functions_writing_results() -> set[str]:
    """``module:function`` of every function of posenc that names the results file and writes a file."""
    found = set()
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not any(
                    isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) for child in ast.walk(node)
                    if child is not node):
                if _names_results(node) and _writes(node):
                    found.add(f"{path.relative_to(SRC).with_suffix('')}:{node.name}")
    return found


def test_run_write_results_is_the_one_writer() -> None:
    assert _functions_writing_results() == {"runs/run:write_results"}


def test_the_grid_stores_every_cells_results_through_its_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the run's writer silenced, a grid brought up to date leaves no results.json anywhere:
    nothing else writes one."""
    exp = {"name": "dummy", "task": "tests.dummy_task", "out_dir": str(tmp_path / "exp"),
           "base": {"model": {"dim": 3}, "train": {"max_steps": 2}}, "methods": {"nobias": {}, "bias": {"model.bias": True}}}
    path = tmp_path / "dummy.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    stored: list[Path] = []
    monkeypatch.setattr(Run, "write_results", lambda run, results: stored.append(run.out) or results)
    run_experiment(str(path))
    monkeypatch.undo()
    assert sorted(stored) == sorted(tmp_path.glob("exp/plain/*/seed1")) and len(stored) == 2
    assert not list(tmp_path.rglob(RESULTS_NAME))
    run_experiment(str(path))  # judged again: nothing stored, so every cell is brought up to date and stored
    assert sorted(p.parent for p in tmp_path.rglob(RESULTS_NAME)) == sorted(stored)
