"""The translation task (SHAPE, Shaw RPE, RNN-/RR-Transformer, CAPE MT).

One run: its config (:mod:`~posenc.tasks.translation.config`, ``RunConfig``), data preparation
(:mod:`~posenc.tasks.translation.prepare`), training pieces (:mod:`~posenc.tasks.translation.train`),
the :class:`~posenc.tasks.base.Task` that ``posenc train`` runs and the task's grid, ``TASK``
(:mod:`~posenc.tasks.translation.task`), and loading a trained run to decode and score it
(:mod:`~posenc.tasks.translation.load`). The experiment side: its schema
(:mod:`~posenc.tasks.translation.experiment`, ``ExperimentConfig``), what a cell's freshness adds
(:mod:`~posenc.tasks.translation.freshness`), report, convergence and length-penalty tuning.

The package's exports (``TASK``, ``TranslationTask``, ``train_run``) are loaded on first use
(PEP 562): the task module imports the whole experiment side (reports, analyses, matplotlib),
which ``posenc translate``/``export``/``average`` and :func:`~posenc.tasks.translation.load.load_run`
never need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posenc.tasks.exports import lazy_exports

if TYPE_CHECKING:
    from posenc.tasks.translation.task import TASK, TranslationTask, train_run

__all__ = ["TASK", "TranslationTask", "train_run"]


__getattr__, __dir__ = lazy_exports(__name__, {"task": tuple(__all__)})
