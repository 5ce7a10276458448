"""An experiment's task is looked up once (per process) and passed along beside its grid (an
:class:`~posenc.experiments.experiment.Experiment`), not once per runner step and cell. Counted on the dummy
task's grid (2 methods × 2 seeds) by a spy on :func:`posenc.experiments.tasks.task_module`, which
every lookup goes through."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from posenc.config import from_dict, merge_overrides
from posenc.experiments import runner, scheduler, tasks, worker

TASK = "tests.dummy_task"
CELLS = [("plain", m, s) for m in ("nobias", "bias") for s in (1, 2)]


def _write(tmp_path: Path) -> Path:
    exp = {"name": "dummy", "task": TASK, "out_dir": str(tmp_path / "exp"),
           "base": {"model": {"dim": 3}, "train": {"max_steps": 2}},
           "settings": {"plain": {}}, "methods": {"nobias": {}, "bias": {"model.bias": True}}, "seeds": [1, 2]}
    path = tmp_path / "dummy.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    return path


def _exp(path: Path) -> Any:
    """The grid of the YAML at ``path`` (its task looked up here, before any spy)."""
    task = tasks.find_task(TASK)
    schema = task.experiment_config
    return task.experiment(from_dict(schema, merge_overrides(yaml.safe_load(path.read_text(encoding="utf-8")), [],
                                                             schema)))


def _count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Wrap ``task_module`` (every lookup, the runner's through ``find_task``, calls it) with a spy;
    returns its calls."""
    calls: list[str] = []
    real = tasks.task_module

    def spy(ref: str) -> Any:
        calls.append(ref)
        return real(ref)

    monkeypatch.setattr(tasks, "task_module", spy)
    return calls


def _trained(exp: Any) -> list[tuple[str, str, int]]:
    """The cells with a results.json holding their own coordinates (read from disk)."""
    found = []
    for path in sorted(exp.root.glob("*/*/seed*/results.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        found.append((r["setting"], r["method"], r["seed"]))
    return found


def test_a_serial_grid_looks_its_task_up_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    exp = _exp(_write(tmp_path))
    calls = _count_lookups(monkeypatch)
    report = runner.run_grid(exp, jobs=1)
    assert calls == [TASK]  # plan, 4 verdicts, 4 runs, 4 summary lines, read-back, report: one lookup
    assert sorted(_trained(exp)) == sorted(CELLS)
    assert capsys.readouterr().out.count("done ") == 4
    assert (report / "README.md").read_text(encoding="utf-8").count("| plain |") == 4
    calls.clear()
    runner.run_grid(exp, jobs=1, report_only=True)  # every cell fresh: read back, reported
    assert calls == [TASK]


def test_run_experiment_looks_its_task_up_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path)
    calls = _count_lookups(monkeypatch)
    runner.run_experiment(str(path), jobs=1)  # task_runner finds the module; run_grid gets its TASK
    assert calls == [TASK]
    assert sorted(_trained(_exp(path))) == sorted(CELLS)


def test_a_worker_looks_its_task_up_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exp = _exp(_write(tmp_path))
    spec = scheduler.write_spec(exp.options)
    calls = _count_lookups(monkeypatch)
    result = worker.run_cell(str(spec), "plain", "bias", 2)
    assert calls == [TASK]
    assert (result["setting"], result["method"], result["seed"]) == ("plain", "bias", 2)
    assert _trained(exp) == [("plain", "bias", 2)]


def test_a_package_without_a_task_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``task: PKG`` naming a package with no ``TASK`` and no ``task`` module is the one-line
    "defines no TASK" error, not an import traceback; a ``task`` module that itself fails to import
    a missing module still raises that error (a bug in the task, not in the YAML)."""
    from posenc.errors import ConfigError

    (tmp_path / "lookup_pkgs").mkdir()
    (tmp_path / "lookup_pkgs" / "__init__.py").write_text("")
    for pkg, task in (("taskless", None), ("broken", "import no_such_module_here\n")):
        (tmp_path / "lookup_pkgs" / pkg).mkdir()
        (tmp_path / "lookup_pkgs" / pkg / "__init__.py").write_text("")
        if task is not None:
            (tmp_path / "lookup_pkgs" / pkg / "task.py").write_text(task)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"^experiment task 'lookup_pkgs.taskless': its module defines no TASK"):
        tasks.find_task("lookup_pkgs.taskless")
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        tasks.find_task("lookup_pkgs.broken")
