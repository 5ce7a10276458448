"""The translation task (SHAPE, Shaw RPE, RNN-/RR-Transformer, CAPE MT): a wrapper of
:mod:`posenc.pipeline` behind the :class:`~posenc.tasks.base.Task` interface."""

from posenc.tasks.translation.task import TranslationTask, train_run

__all__ = ["TranslationTask", "train_run"]
