"""A task is a fully declared interface: :class:`~posenc.tasks.base.Task` (one run) and
:class:`~posenc.experiments.tasks.ExperimentTask` (its grid) declare every method the trainer's
caller and the runner call, with defaults for the optional ones, so nothing is looked up by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posenc.experiments.tasks import ExperimentTask, find_task, known_tasks
from posenc.tasks.base import Task

SRC = Path(__file__).resolve().parents[2] / "src" / "posenc"
#: ``getattr(task, ...)``, ``getattr(self.task, ...)``, ``getattr(grid.task, ...)``: a hook found by name.
LOOKUP = re.compile(r"getattr\(\s*(?:\w+\.)?task\b")


def test_no_task_method_is_looked_up_by_name() -> None:
    found = [f"{p.relative_to(SRC)}:{n}" for p in sorted(SRC.rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if LOOKUP.search(line)]
    assert found == []
    assert LOOKUP.search('hook = getattr(grid.task, "check_carried", None)')  # control: the scan sees one


def test_the_required_methods_are_abstract_and_the_hooks_have_defaults() -> None:
    assert Task.__abstractmethods__ == {"build_model", "train_batches", "valid_batches", "loss", "width", "evaluate"}
    assert ExperimentTask.__abstractmethods__ == {"new_task", "experiment", "verdict", "run_cell", "summary_line",
                                                  "report"}

    class Bare(Task):
        name = "bare"

    with pytest.raises(TypeError, match="abstract"):
        Bare()  # type: ignore[abstract]
    task = type("Minimal", (Task,), dict.fromkeys(Task.__abstractmethods__, lambda *a: None))()
    assert task.setup("cfg", True) == "cfg" and task.summary("cfg") == {} and task.checkpoint_state("cfg") == {}
    assert task.validation_metric("cfg") is None and task.check("cfg") is None


@pytest.mark.parametrize("name", known_tasks())
def test_every_shipped_task_implements_both(name: str) -> None:
    experiment = find_task(name)
    assert isinstance(experiment, ExperimentTask) and isinstance(experiment.new_task(), Task)
