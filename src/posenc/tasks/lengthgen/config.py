"""Typed configs of the length-generalization suite: one run, and the experiment grid."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from posenc.config import apply_mapping, from_dict, require, to_dict
from posenc.experiments.experiment import Experiment
from posenc.experiments.task_grid import MethodsExperimentConfig, methods_experiment
from posenc.models.lm import LMConfig
from posenc.positions import PositionConfig
from posenc.runs.spec import RunSpec
from posenc.tasks.lengthgen.generators import POSITION_IDS, TASKS
from posenc.tasks.lengthgen.spec import SPEC
from posenc.training.config import TrainConfig


@dataclass
class LengthgenData:
    task: str = "parity"
    train_min_length: int = 1
    train_max_length: int = 40
    test_max_length: int = 500
    test_step: int = 10  # test lengths: test_step, 2·test_step, ..., test_max_length
    batch_size: int = 64
    curriculum_steps: int = 0  # > 0: the longest training length grows linearly to train_max_length over these batches
    steps_per_epoch: int = 100
    eval_samples: int = 64  # examples per test length
    eval_batch_size: int = 32
    eval_seed: int = 1_000_003  # test examples use this seed, training train.seed
    valid_seed: int = 2_000_003  # validation examples (never the test or training seed)
    valid_lengths: int = 4  # validation lengths: spread over the training range, none a test length
    #: model.position options applied at test time only, e.g. {rope.scaling: yarn, rope.factor: 4,
    #: rope.original_max_position: 41}: train plain, evaluate with RoPE scaling (empty: as trained)
    eval_position: dict[str, Any] = field(default_factory=dict)
    #: the position ids the model reads: index (0..L−1) or coupled (position coupling, Cho et al.
    #: 2024 / Abacus digit indices, McLeish et al. 2024: a token's index in its number, separators 0)
    position_ids: str = "index"

    def __post_init__(self) -> None:
        require(self.task in TASKS, f"data.task {self.task!r} unknown (known: {', '.join(TASKS)})")
        low = max(self.train_min_length, TASKS[self.task][1])
        require(low <= self.train_max_length,
                f"data: train lengths [{self.train_min_length}, {self.train_max_length}] are empty for {self.task}")
        require(self.test_step >= 1 and self.test_max_length >= self.test_step,
                "data: need test_max_length >= test_step >= 1")
        require(self.valid_seed != self.eval_seed,
                f"data.valid_seed must differ from data.eval_seed ({self.eval_seed})")
        require(self.position_ids in POSITION_IDS,
                f"data.position_ids {self.position_ids!r} unknown (known: {', '.join(POSITION_IDS)})")
        require(self.curriculum_steps >= 0, f"data.curriculum_steps must be >= 0, got {self.curriculum_steps}")
        for name in ("batch_size", "steps_per_epoch", "eval_samples", "eval_batch_size", "valid_lengths"):
            require(getattr(self, name) >= 1, f"data.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def train_lengths(self) -> tuple[int, int]:
        return max(self.train_min_length, TASKS[self.task][1]), self.train_max_length

    def train_lengths_at(self, index: int) -> tuple[int, int]:
        """Training range of global batch ``index``: with a curriculum the upper end grows
        linearly from the shortest to the longest training length over ``curriculum_steps``."""
        low, high = self.train_lengths
        if self.curriculum_steps <= 0 or index >= self.curriculum_steps:
            return low, high
        return low, low + round((high - low) * (index + 1) / self.curriculum_steps)

    @property
    def test_lengths(self) -> list[int]:
        low = TASKS[self.task][1]
        return sorted({max(n, low) for n in range(self.test_step, self.test_max_length + 1, self.test_step)})

    @property
    def validation_lengths(self) -> list[int]:
        """Up to ``valid_lengths`` training lengths, spread from the longest down, that are not
        test lengths (so no validation example is a test example; the training range itself
        when every training length is a test length)."""
        low, high = self.train_lengths
        test = set(self.test_lengths)
        pool = [n for n in range(high, low - 1, -1) if n not in test] or list(range(high, low - 1, -1))
        k = min(self.valid_lengths, len(pool))
        picks = {pool[round(i * (len(pool) - 1) / max(1, k - 1))] for i in range(k)}
        return sorted(picks)


@dataclass
class LengthgenConfig:
    """One run: a decoder-only LM trained on one task."""

    model: LMConfig = field(default_factory=LMConfig)
    data: LengthgenData = field(default_factory=LengthgenData)
    train: TrainConfig = field(default_factory=TrainConfig)
    out_dir: str = "runs/lengthgen"

    #: What the task declares about its runs (runs/spec.py).
    run_spec: ClassVar[RunSpec] = SPEC

    def __post_init__(self) -> None:
        self.eval_model()  # a bad data.eval_position is a one-line ConfigError here, before training
        if self.data.position_ids == "index":
            self.model.position.refuse_task_ids("data.position_ids=index")

    def eval_model(self) -> LMConfig:
        """The model config of the test-length evaluation: ``model`` with ``data.eval_position`` applied."""
        if not self.data.eval_position:
            return self.model
        position = apply_mapping(to_dict(self.model.position), _dotted(self.data.eval_position), PositionConfig)
        return replace(self.model, position=from_dict(PositionConfig, position, "data.eval_position"))


def _dotted(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{rope: {factor: 4}}`` or ``{rope.factor: 4}`` → ``{"rope.factor": 4}``."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@dataclass
class LengthgenExperimentConfig(MethodsExperimentConfig):
    """The shared methods × seeds schema (:class:`~posenc.experiments.task_grid.MethodsExperimentConfig`) with
    the algorithmic ``tasks`` as the grid's settings; ``task_overrides`` maps task → dotted overrides
    applied after the method's (e.g. more steps for parity)."""

    name: str = "lengthgen"
    task: str = "lengthgen"
    seeds: list[int] = field(default_factory=lambda: [1])
    task_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=lambda: list(TASKS))

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.task == "lengthgen", f"task must be 'lengthgen' for this schema, got {self.task!r}")
        require(len(self.tasks) >= 1 and len(set(self.tasks)) == len(self.tasks),
                "experiment.tasks must be distinct and non-empty")
        bad = [t for t in self.tasks if t not in TASKS]
        require(not bad, f"experiment.tasks: {bad[0] if bad else ''!r} unknown (known: {', '.join(TASKS)})")
        unknown = [t for t in self.task_overrides if t not in TASKS]
        require(not unknown, f"experiment.task_overrides: {unknown[0] if unknown else ''!r} is not a task "
                f"(known: {', '.join(TASKS)})")


def run_config(exp: LengthgenExperimentConfig, task: str, method: str, seed: int) -> LengthgenConfig:
    """The run config of one cell of the grid (:func:`experiment_of`): base + method overrides +
    task overrides + task + seed, in ``root/task/method/seedN``.

    Args:
        exp: the experiment config.
        task: the cell's algorithmic task.
        method: its method label.
        seed: its seed.

    Returns:
        The run config.
    """
    return experiment_of(exp).run_config((task, method, seed))


def experiment_of(exp: LengthgenExperimentConfig) -> Experiment:
    """The grid of ``exp`` (:func:`~posenc.experiments.task_grid.methods_experiment`): the algorithmic tasks
    are its outer axis (:func:`task_groups`).

    Args:
        exp: the experiment config.

    Returns:
        The :class:`~posenc.experiments.experiment.Experiment`.
    """
    return methods_experiment(exp, LengthgenConfig, task_groups(exp))


def task_groups(exp: LengthgenExperimentConfig) -> dict[str, dict[str, Any]]:
    """Each task's overrides, applied after a method's: its ``task_overrides``, then ``data.task``.

    Args:
        exp: the experiment config.

    Returns:
        Task → dotted overrides, in ``exp.tasks`` order.
    """
    return {task: {**exp.task_overrides.get(task, {}), "data.task": task} for task in exp.tasks}


def expand(exp: LengthgenExperimentConfig) -> list[tuple[str, str, int, LengthgenConfig]]:
    """Every (task, method, seed, run config) of the grid (:func:`experiment_of`, built once), each
    run config validated.

    Args:
        exp: the experiment config.

    Returns:
        The cells with their run configs, task-major.
    """
    grid = experiment_of(exp)
    return [(*cell, grid.run_config(cell)) for cell in grid.cells()]
