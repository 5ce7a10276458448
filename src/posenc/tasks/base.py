"""The task interface: what a task provides so the one Trainer and ``posenc experiment`` run it.

A task turns its typed run config into a model, training/validation batches and a loss; after
training it evaluates the model. (Its experiment grid, i.e. cells, freshness and report, is the
task's experiment side: :mod:`posenc.experiments.runner`.) The Trainer never
knows which task it trains: it gets the task's ``loss`` and ``width`` (and metric) explicitly.

:func:`run_task` is the one way a task trains: seed, ``build_model``, the Trainer with
``loss_fn=task.loss`` over ``train_batches``/``valid_batches`` (AMP, checkpoints, exact resume,
DDP, logging, best-N averaging), then ``evaluate``. A task's run config has a ``train`` section
that is a :class:`~posenc.training.config.TrainConfig` (tasks subclass it to change defaults) and
may have ``model``/``data`` dataclass sections (stored with every checkpoint). Tasks hold their
loaded data between calls (so ``train_batches`` does not reload it every epoch).

:func:`run_task` opens the run directory as one :class:`~posenc.runs.run.Run`, for every task:
it refuses a directory posenc did not write, holds its lock, judges the stored record and loads the
checkpoint it resumes from (once) before anything is written, and writes the ownership marker,
``config.yaml``, ``fingerprint.json`` (:meth:`~posenc.runs.run.Run.commit`, called by the Trainer
once it has restored that checkpoint) and, through the Trainer, ``summary.json``. What the task
declares about its runs (files, derived keys) is its config's ``run_spec``
(:class:`~posenc.runs.spec.RunSpec`). Optional hooks (looked up with ``getattr``):

``check(cfg)``
    first of all: what the run reads is there (a one-line error, nothing written);
``setup(cfg, restart) -> cfg``
    after the fingerprint check, before the model: prepare data, fill data-dependent values;
``checkpoint_sections(cfg) -> dict``
    config sections stored with every checkpoint (default: the ``model``/``data`` dataclasses);
``checkpoint_state(cfg) -> dict``
    extra state.json entries of every checkpoint, checked on resume (translation: the vocabulary's hash);
``write_files(cfg, out_dir)``
    the task's own files of the run directory (e.g. the vocabulary);
``validation_metric(cfg) -> Callable[[nn.Module], float] | None``
    a metric during training every ``train.metric_every`` updates (translation: greedy BLEU);
``summary(cfg) -> dict``
    extra entries of ``summary.json`` (asked before training; the Trainer writes them with its own).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch
from torch import nn

from posenc.runs.run import Run
from posenc.training.device import resolve_device
from posenc.training.distributed import env_int
from posenc.training.loss import LossOutput
from posenc.training.result import TrainResult
from posenc.training.trainer import Trainer


@runtime_checkable
class Task(Protocol):
    """One task (translation, vision, speech, lengthgen). ``cfg`` is the task's run config."""

    #: The ``task:`` key of experiment YAMLs.
    name: str

    def build_model(self, cfg: Any) -> nn.Module:
        """The model for ``cfg``; :func:`run_task` seeds torch with ``cfg.train.seed`` just before
        calling it, so its initial weights follow the seed (draw nothing from torch's RNG before)."""
        ...

    def train_batches(self, cfg: Any, epoch: int, rank: int, world: int) -> Sequence[Any]:
        """Training batches of one epoch: a pure function of its arguments (exact resume)."""
        ...

    def valid_batches(self, cfg: Any) -> Sequence[Any] | None:
        """Validation batches (loss/perplexity during training), or None."""
        ...

    def loss(self, model: nn.Module, batch: Any) -> LossOutput:
        """Summed loss, summed NLL and token/item count of one batch."""
        ...

    def width(self, cfg: Any) -> int:
        """The model width: ``d_model`` of the Noam schedule (the Trainer never guesses it)."""
        ...

    def evaluate(self, cfg: Any, model: nn.Module, out_dir: Path, result: TrainResult) -> dict[str, Any]:
        """Task metrics of a trained model (BLEU, accuracy by resolution, WER by duration, ...);
        ``result`` is the Trainer's (best step, stop reason), so nothing is read back from disk."""
        ...


@dataclass
class TaskRun:
    """One trained run of a task: the model (eval mode), the Trainer's result, the task metrics,
    the run summary (``summary.json``) and the run it was trained in (its resolved config and
    config sections: a finished run opened in the same process needs to read neither again)."""

    model: nn.Module
    result: TrainResult
    metrics: dict[str, Any]
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    run: Run | None = None


def run_task(task: Task, cfg: Any, out_dir: str | Path | None = None, resume: bool = True) -> TaskRun:
    """Build, train (the one :class:`~posenc.training.trainer.Trainer`, with the task's loss and
    batches) and evaluate one run in ``out_dir`` (default ``cfg.out_dir``), opened as one
    :class:`~posenc.runs.run.Run`.

    The directory must be new, empty or posenc's own run; rank 0 holds its lock throughout.
    Everything is validated (the run's record and its checkpoint's, the device, the model build,
    the checkpoint's fit) before the first byte is written. An earlier run of the same config is
    resumed (a finished one only evaluated); one of another config is an error unless ``resume`` is
    False, which replaces its outputs. Under DDP (torchrun) only rank 0 evaluates; the other ranks'
    :class:`TaskRun` has no metrics."""
    out = Path(cfg.out_dir if out_dir is None else out_dir)
    with Run.open(cfg, out, resume, check=partial(_hook, task, "check")) as run:
        resolve_device(cfg.train.device, env_int("LOCAL_RANK", 0))  # usable here, before any data is prepared
        return _train(task, run, resume)


def _train(task: Task, run: Run, resume: bool) -> TaskRun:
    """Set the task up on the opened ``run``, train from the checkpoint the run loaded and evaluate."""
    setup = getattr(task, "setup", None)
    cfg = setup(run.cfg, not resume) if setup else run.cfg
    torch.manual_seed(cfg.train.seed)  # initial weights follow train.seed
    model = task.build_model(cfg)
    valid = task.valid_batches(cfg)
    metric = _hook(task, "validation_metric", cfg)
    run.settle(cfg, _hook(task, "checkpoint_sections", cfg) or _sections(cfg))  # the record, computed once
    extra = _hook(task, "summary", cfg) or {}  # the task's summary.json entries (known before training)
    contents = run.contents(_hook(task, "checkpoint_state", cfg), extra)
    trainer = Trainer(model, cfg.train, run.out, task.loss, d_model=task.width(cfg), contents=contents)
    main = env_int("RANK", 0) == 0
    commit = partial(run.commit, getattr(task, "write_files", None)) if main else None
    result = trainer.fit(partial(task.train_batches, cfg), valid, metric, resume=run.checkpoint, on_start=commit)
    model.eval()
    metrics = task.evaluate(cfg, model, run.out, result) if main else {}  # rank 0 evaluates (and writes)
    return TaskRun(model, result, metrics, result.run_record, run)


def _hook(task: Task, name: str, *args: Any) -> Any:
    """The optional hook ``name`` of ``task`` called with ``args``, or None when it has none."""
    fn: Callable[..., Any] | None = getattr(task, name, None)
    return fn(*args) if fn is not None else None


def _sections(cfg: Any) -> dict[str, Any]:
    """Config sections stored with every checkpoint (the ``model`` one must match on resume);
    the Trainer stores them as plain types (:func:`~posenc.training.state.config_sections`)."""
    return {name: getattr(cfg, name) for name in ("model", "data")
            if dataclasses.is_dataclass(getattr(cfg, name, None))}
