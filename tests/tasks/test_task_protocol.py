"""A task is a fully declared interface of one protocol: :class:`~posenc.tasks.base.Task` (one run)
subclasses :class:`~posenc.experiments.task_grid.TaskGrid` (its grid side, declared below the tasks),
and the two declare every method the trainer's caller and the runner call, with defaults for the
optional ones, so nothing is looked up by name; every shipped task subclasses ``Task`` alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posenc.experiments.task_grid import TaskGrid
from posenc.experiments.tasks import find_task, known_tasks
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
    run_side = {"build_model", "train_batches", "valid_batches", "loss", "width", "evaluate"}
    assert TaskGrid.__abstractmethods__ == {"new_task", "train", "summary_line", "report"}
    assert Task.__abstractmethods__ == run_side | {"new_task", "summary_line", "report"}  # Task trains a cell

    class Bare(Task):
        name = "bare"

    with pytest.raises(TypeError, match="abstract"):
        Bare()  # type: ignore[abstract]
    task = type("Minimal", (Task,), dict.fromkeys(Task.__abstractmethods__, lambda *a: None))()
    assert task.setup("cfg", True) == "cfg" and task.summary("cfg") == {} and task.checkpoint_state("cfg") == {}
    assert task.validation_metric("cfg") is None and task.check("cfg") is None
    assert task.groups(None) == {} and task.stored_training("cfg") is None and task.prepare(None, []) is None


@pytest.mark.parametrize("name", known_tasks())
def test_every_shipped_task_is_one_class_of_the_one_protocol(name: str) -> None:
    task = find_task(name)
    assert type(task).__bases__ == (Task,) and isinstance(task, TaskGrid) and isinstance(task.new_task(), Task)
