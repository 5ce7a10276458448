"""A dummy task that lives entirely in this package (issue 19: a new task is one package, no edit
outside it). ``task: tests.dummy_task`` in an experiment YAML finds it by module path; its
``TASK`` is the task, whose grid side the shared grid runner asks for.

Regression of ``y = x · w`` with a linear model: the smallest thing that trains through
:func:`posenc.tasks.base.run_task` and the one Trainer."""

from tests.dummy_task.experiment import DummyExperimentConfig
from tests.dummy_task.task import TASK, DummyConfig, DummyTask

__all__ = ["TASK", "DummyConfig", "DummyExperimentConfig", "DummyTask"]
