"""The translation task (SHAPE, Shaw RPE, RNN-/RR-Transformer, CAPE MT): a wrapper of
:mod:`posenc.pipeline` behind the :class:`~posenc.tasks.base.Task` interface."""

from posenc.tasks.translation.task import TranslationTask, train_run

__all__ = ["TranslationTask", "train_run"]


def __getattr__(name: str) -> object:
    """``TASK``: the experiment side (:mod:`posenc.tasks.translation.driver`), imported on
    first use so ``posenc train`` does not load the report and its analyses."""
    if name == "TASK":
        from posenc.tasks.translation.driver import TASK

        return TASK
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
