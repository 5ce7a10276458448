"""The task interface: what a task provides so the one Trainer and ``posenc experiment`` run it.

A task turns its typed run config into a model, training/validation batches and a loss; after
training it evaluates the model. Its experiment grid (its YAML as an experiment, freshness,
scoring and report) is the grid side it inherits, declared below the tasks by
:class:`posenc.experiments.task_grid.TaskGrid` (with the defaults of a methods × seeds grid), so a
task is one class of one protocol: :class:`Task`. The Trainer never knows which task it trains: it
gets the task's ``loss`` and ``width`` (and metric) explicitly.

:class:`Task` declares the whole run interface: six methods every task defines (abstract) and seven
hooks with a default that does nothing, which a task overrides where it has something to do.
:func:`run_task` calls each of them; nothing is looked up by name.

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
(:class:`~posenc.runs.spec.RunSpec`).
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import torch
from torch import nn

from posenc.experiments.task_grid import TaskGrid
from posenc.runs.run import Run
from posenc.runs.same_run import Verdict
from posenc.training.device import resolve_device
from posenc.training.distributed import env_int
from posenc.training.loss import LossOutput
from posenc.training.result import TrainResult
from posenc.training.trainer import Trainer


class Task(TaskGrid):
    """One task (translation, vision, speech, lengthgen). ``cfg`` is the task's run config.

    A task subclasses this class, and only this one: it defines the six abstract methods of a run
    and overrides the hooks (:meth:`check` … :meth:`summary`) it needs; the others keep their
    defaults, which do nothing. Its grid side (:class:`~posenc.experiments.task_grid.TaskGrid`) asks
    it for ``new_task``, ``summary_line`` and ``report``; a cell trains through :meth:`train`.
    """

    #: The ``task:`` key of experiment and run YAMLs.
    name: ClassVar[str]

    # ------------------------------------------------------------------ what every task defines
    @abc.abstractmethod
    def build_model(self, cfg: Any) -> nn.Module:
        """The model of a run.

        Args:
            cfg: the run config; :func:`run_task` seeds torch with ``cfg.train.seed`` just before
                this call, so the initial weights follow the seed (draw nothing from torch's RNG before).

        Returns:
            The model, on the CPU (the Trainer moves it).
        """

    @abc.abstractmethod
    def train_batches(self, cfg: Any, epoch: int, rank: int, world: int) -> Sequence[Any]:
        """Training batches of one epoch: a pure function of its arguments (exact resume).

        Args:
            cfg: the run config.
            epoch: the epoch, from 0.
            rank: this process's rank under DDP (0 otherwise).
            world: the number of processes (1 without DDP).

        Returns:
            This rank's batches of ``epoch``, in order.
        """

    @abc.abstractmethod
    def valid_batches(self, cfg: Any) -> Sequence[Any] | None:
        """Validation batches (loss/perplexity during training, the stopping signal).

        Args:
            cfg: the run config.

        Returns:
            The batches, the same on every call, or None when the run does not validate.
        """

    @abc.abstractmethod
    def loss(self, model: nn.Module, batch: Any) -> LossOutput:
        """The loss of one batch.

        Args:
            model: the model being trained.
            batch: one of :meth:`train_batches` or :meth:`valid_batches`.

        Returns:
            Summed loss, summed NLL and token/item count of the batch.
        """

    @abc.abstractmethod
    def width(self, cfg: Any) -> int:
        """The model width: ``d_model`` of the Noam schedule (the Trainer never guesses it).

        Args:
            cfg: the run config.

        Returns:
            The width.
        """

    @abc.abstractmethod
    def evaluate(self, cfg: Any, model: nn.Module, out_dir: Path, result: TrainResult) -> dict[str, Any]:
        """Task metrics of a trained model (BLEU, accuracy by resolution, WER by duration, ...).

        Args:
            cfg: the run config.
            model: the trained model, in eval mode.
            out_dir: the run directory (the task may write its own files there).
            result: the Trainer's result (best step, stop reason), so nothing is read back from disk.

        Returns:
            The metrics, JSON-safe.
        """

    def train(self, cfg: Any, verdict: Verdict | None) -> TaskRun:
        """A cell's run trained (resuming) and evaluated by a fresh task (:meth:`new_task`) through
        :func:`run_task`, with the verdict on its run judged once.

        Args:
            cfg: the cell's run config.
            verdict: the verdict on the run in its directory (None: nothing recorded).

        Returns:
            The trained run.
        """
        return run_task(self.new_task(), cfg, verdict=verdict)

    # ------------------------------------------------------------------ hooks, with defaults
    def check(self, cfg: Any) -> None:
        """Check, before anything is written, that what the run reads is there.

        Args:
            cfg: the run config.

        Raises:
            PosencError: one line naming what is missing (default: nothing to check).
        """
        return None

    def setup(self, cfg: Any, restart: bool) -> Any:
        """Prepare the data and fill in data-dependent values, after the record check, before the model.

        Args:
            cfg: the run config.
            restart: True when the run starts afresh (``resume=False``): rebuild what it owns.

        Returns:
            The config the run trains (default: ``cfg`` unchanged).
        """
        return cfg

    def checkpoint_sections(self, cfg: Any) -> dict[str, Any]:
        """Config sections stored with every checkpoint (the ``model`` one must match on resume).

        Args:
            cfg: the run config (after :meth:`setup`).

        Returns:
            Section name → value (default: the ``model``/``data`` dataclass sections of ``cfg``).
        """
        return {name: getattr(cfg, name) for name in ("model", "data")
                if dataclasses.is_dataclass(getattr(cfg, name, None))}

    def checkpoint_state(self, cfg: Any) -> dict[str, Any]:
        """Extra state.json entries of every checkpoint, checked on resume (translation: the vocabulary's hash).

        Args:
            cfg: the run config (after :meth:`setup`).

        Returns:
            Entry → JSON-safe value (default: none).
        """
        return {}

    def write_files(self, cfg: Any, out_dir: Path) -> None:
        """Write the task's own files of the run directory (e.g. the vocabulary); rank 0, once the
        checkpoint the run resumes from is restored (default: none).

        Args:
            cfg: the run config (after :meth:`setup`).
            out_dir: the run directory.
        """
        return None

    def validation_metric(self, cfg: Any) -> Callable[[nn.Module], float] | None:
        """A metric computed during training every ``train.metric_every`` updates (translation: greedy BLEU).

        Args:
            cfg: the run config (after :meth:`setup`).

        Returns:
            ``model -> value``, or None for no metric (the default).
        """
        return None

    def summary(self, cfg: Any) -> dict[str, Any]:
        """Extra entries of ``summary.json``, asked before training (the Trainer writes them with its own).

        Args:
            cfg: the run config (after :meth:`setup`).

        Returns:
            Entry → JSON-safe value (default: none).
        """
        return {}


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


def run_task(task: Task, cfg: Any, out_dir: str | Path | None = None, resume: bool = True,
             verdict: Verdict | None = None) -> TaskRun:
    """Build, train (the one :class:`~posenc.training.trainer.Trainer`, with the task's loss and
    batches) and evaluate one run in ``out_dir`` (default ``cfg.out_dir``), opened as one
    :class:`~posenc.runs.run.Run`.

    The directory must be new, empty or posenc's own run; rank 0 holds its lock throughout.
    Everything is validated (the run's record and its checkpoint's, the device, the model build,
    the checkpoint's fit) before the first byte is written. An earlier run of the same config is
    resumed (a finished one only evaluated); one of another config is an error unless ``resume`` is
    False, which replaces its outputs. Under DDP (torchrun) only rank 0 evaluates; the other ranks'
    :class:`TaskRun` has no metrics. ``verdict``: the caller's verdict on the run (a grid cell's),
    handed to :meth:`Run.open <posenc.runs.run.Run.open>` so the run is not judged again."""
    out = Path(cfg.out_dir if out_dir is None else out_dir)
    with Run.open(cfg, out, resume, check=task.check, verdict=verdict) as run:
        resolve_device(cfg.train.device, env_int("LOCAL_RANK", 0))  # usable here, before any data is prepared
        return _train(task, run, resume)


def _train(task: Task, run: Run, resume: bool) -> TaskRun:
    """Set the task up on the opened ``run``, train from the checkpoint the run loaded and evaluate."""
    cfg = task.setup(run.cfg, not resume)
    torch.manual_seed(cfg.train.seed)  # initial weights follow train.seed
    model = task.build_model(cfg)
    valid = task.valid_batches(cfg)
    metric = task.validation_metric(cfg)
    run.set_resolved(cfg, task.checkpoint_sections(cfg))  # the record, computed once
    extra = task.summary(cfg)  # the task's summary.json entries (known before training)
    contents = run.contents(task.checkpoint_state(cfg), extra)
    trainer = Trainer(model, cfg.train, run.out, task.loss, d_model=task.width(cfg), contents=contents)
    main = env_int("RANK", 0) == 0
    commit = partial(run.commit, task.write_files) if main else None
    result = trainer.fit(partial(task.train_batches, cfg), valid, metric, resume=run.checkpoint, on_start=commit)
    model.eval()
    metrics = task.evaluate(cfg, model, run.out, result) if main else {}  # rank 0 evaluates (and writes)
    return TaskRun(model, result, metrics, result.run_record, run)
