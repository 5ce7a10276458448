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

:func:`run_task` owns the run directory, for every task: it refuses a directory posenc did not
write (:func:`~posenc.runs.rundir.check_free_target`), holds its lock, checks the stored
fingerprint before resuming (:func:`~posenc.runs.rundir.open_run`), and writes the ownership
marker, ``config.yaml``, ``fingerprint.json`` (:func:`~posenc.runs.rundir.commit_run`, called
by the Trainer once it has restored the checkpoint it resumes from) and ``summary.json``.
Optional hooks (looked up with ``getattr``):

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
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch
from torch import nn

from posenc.runs.rundir import check_free_target, commit_run, exclusive, open_run
from posenc.runs.same_run import RunRecord
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
        """The model for ``cfg`` (initial weights follow ``cfg.train.seed``)."""
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
    """One trained run of a task: the model (eval mode), the Trainer's result, the task metrics
    and the run summary (``summary.json``)."""

    model: nn.Module
    result: TrainResult
    metrics: dict[str, Any]
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)


def run_task(task: Task, cfg: Any, out_dir: str | Path | None = None, resume: bool = True) -> TaskRun:
    """Build, train (the one :class:`~posenc.training.trainer.Trainer`, with the task's loss and
    batches) and evaluate one run in ``out_dir`` (default ``cfg.out_dir``).

    The directory must be new, empty or posenc's own run; rank 0 holds its lock throughout.
    Everything is validated (device, fingerprint, model build, checkpoint load) before the first
    byte is written. An earlier run of the same config is resumed (a finished one only evaluated);
    one of another config is an error unless ``resume`` is False, which replaces its outputs.
    Under DDP (torchrun) only rank 0 evaluates; the other ranks' :class:`TaskRun` has no metrics."""
    out = Path(cfg.out_dir if out_dir is None else out_dir)
    is_main = env_int("RANK", 0) == 0
    if is_main:
        check_free_target(out, "run")  # new, empty or posenc's own (or in use): never someone else's files
    with exclusive(out) if is_main else nullcontext():
        return _run_locked(task, cfg, out, resume, is_main)


def _run_locked(task: Task, cfg: Any, out: Path, resume: bool, is_main: bool) -> TaskRun:
    _hook(task, "check", cfg)
    opening = open_run(cfg, out, resume)  # device, the run's and its checkpoint's verdict: nothing written yet
    setup = getattr(task, "setup", None)
    cfg = setup(cfg, not resume) if setup else cfg
    record = RunRecord.of(cfg)  # computed once: fingerprint.json and every checkpoint's state
    torch.manual_seed(cfg.train.seed)  # initial weights follow train.seed
    model = task.build_model(cfg)
    valid = task.valid_batches(cfg)
    metric = _hook(task, "validation_metric", cfg)
    sections = _hook(task, "checkpoint_sections", cfg) or _sections(cfg)
    extra = _hook(task, "summary", cfg) or {}  # the task's summary.json entries (known before training)
    state = _hook(task, "checkpoint_state", cfg)
    trainer = Trainer(model, cfg.train, out, task.loss, d_model=task.width(cfg), config=sections, summary=extra,
                      record=record.to_dict(), checkpoint_state=state)
    write = (partial(commit_run, cfg, out, opening.continues, getattr(task, "write_files", None), record)
             if is_main else None)
    result = trainer.fit(partial(task.train_batches, cfg), valid, metric, resume=opening.checkpoint or False,
                         on_start=write)
    summary = result.run_record  # what the Trainer wrote to summary.json
    model.eval()
    # rank 0 evaluates (and writes); under DDP the others do not
    metrics = task.evaluate(cfg, model, out, result) if is_main else {}
    return TaskRun(model, result, metrics, summary)


def _hook(task: Task, name: str, *args: Any) -> Any:
    """The optional hook ``name`` of ``task`` called with ``args``, or None when it has none."""
    fn: Callable[..., Any] | None = getattr(task, name, None)
    return fn(*args) if fn is not None else None


def _sections(cfg: Any) -> dict[str, Any]:
    """Config sections stored with every checkpoint (the ``model`` one must match on resume);
    the Trainer stores them as plain types (:func:`~posenc.training.state.config_sections`)."""
    return {name: getattr(cfg, name) for name in ("model", "data")
            if dataclasses.is_dataclass(getattr(cfg, name, None))}
