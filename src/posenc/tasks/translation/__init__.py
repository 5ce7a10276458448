"""The translation task (SHAPE, Shaw RPE, RNN-/RR-Transformer, CAPE MT).

One run: its config (:mod:`~posenc.tasks.translation.config`, ``RunConfig``), data preparation
(:mod:`~posenc.tasks.translation.prepare`), training pieces (:mod:`~posenc.tasks.translation.train`),
the :class:`~posenc.tasks.base.Task` that ``posenc train`` runs (:mod:`~posenc.tasks.translation.task`)
and loading a trained run to decode and score it (:mod:`~posenc.tasks.translation.load`).
The experiment side: its schema (:mod:`~posenc.tasks.translation.experiment`, ``ExperimentConfig``),
cells, driver, report, convergence and length-penalty tuning. Importing the run side (``posenc
translate``, ``posenc export``) loads none of the experiment side; ``posenc train`` finds the
task through its ``TASK`` (the run schema and ``new_task``), which loads the experiment schema
(and the analyses it validates), never the report."""

from posenc.tasks.translation.task import TranslationTask, train_run

__all__ = ["TranslationTask", "train_run"]


def __getattr__(name: str) -> object:
    """``TASK``: the experiment side (:mod:`posenc.tasks.translation.driver`), imported on
    first use so the run side alone does not load the experiment schema and its analyses."""
    if name == "TASK":
        from posenc.tasks.translation.driver import TASK

        return TASK
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
