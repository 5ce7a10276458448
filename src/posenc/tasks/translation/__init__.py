"""The translation task (SHAPE, Shaw RPE, RNN-/RR-Transformer, CAPE MT): a wrapper of
:mod:`posenc.pipeline` behind the :class:`~posenc.tasks.base.Task` interface."""

from posenc.tasks.translation.task import TranslationTask

__all__ = ["TranslationTask"]
