"""``ExperimentConfig``: a grid of methods × settings × seeds over a base run config, and the grid
it is (:func:`experiment_of`: the settings are its outer axis; each cell's run config also names
its setting's prepared data)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from posenc.analysis.grid_part import skip_reason
from posenc.analysis.registry import check_options, fitting, fitting_names
from posenc.config import require, require_seeds, to_dict
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.selection import SelectionConfig
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.spec import SPEC

#: The analyses that fit translation runs (analysis/registry.py, by what the runs carry): every
#: one an experiment may ask for, and its default.
TRANSLATION_ANALYSES = tuple(fitting_names(SPEC.carries))


@dataclass
class ExperimentConfig:
    name: str = "experiment"
    task: str = "translation"  # other tasks use their own schemas (runner.task_runner)
    out_dir: str = ""  # default runs/NAME
    description: str = ""
    base: dict[str, Any] = field(default_factory=dict)  # the task's run config (a mapping)
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)  # label → dotted overrides
    settings: dict[str, dict[str, Any]] = field(default_factory=lambda: {"vanilla": {}})
    seeds: list[int] = field(default_factory=lambda: [1])
    baseline: str = ""  # method label that gains are measured against (default: the first)
    splits: list[str] = field(default_factory=lambda: ["test"])
    analyses: list[str] = field(default_factory=lambda: list(TRANSLATION_ANALYSES))
    analysis_options: dict[str, Any] = field(default_factory=dict)  # flat; schema: analysis/registry.py
    #: GNMT length penalties α tried first on the validation split of every trained run; the
    #: search then extends the grid while its top (bottom) α is the strict best, and the run's splits
    #: are decoded with the validation peak (tasks/translation/tuning.py). Empty: no search, every
    #: run decodes with its ``decode.length_penalty``.
    tune_length_penalty: list[float] = field(default_factory=list)
    #: The hard upper bound of that search (>= the grid's largest α; equal to it: the grid only).
    tune_length_penalty_max: float = 5.0
    #: Splits also decoded greedily (beam 1, no length penalty) beside the tuned beam, as Neishi &
    #: Yoshinaga decoded: results.json ``greedy``, ``translations/<split>.beam1.hyp``. Empty: none.
    greedy_splits: list[str] = field(default_factory=list)
    #: A selection stage before the grid (experiments/selection.py; empty key = none).
    selection: SelectionConfig = field(default_factory=SelectionConfig)

    def __post_init__(self) -> None:
        require(bool(self.name), "experiment.name must not be empty")
        require(self.task == "translation", f"experiment.task {self.task!r}: this schema is for translation")
        require(len(self.methods) >= 1, f"experiment {self.name}: give at least one method")
        require(len(self.settings) >= 1, f"experiment {self.name}: give at least one setting")
        require(len(self.seeds) >= 1 and len(set(self.seeds)) == len(self.seeds),
                "experiment.seeds must be distinct and non-empty")
        require_seeds(self.seeds, "experiment.seeds")
        require(not self.baseline or self.baseline in self.methods,
                f"experiment.baseline {self.baseline!r} is not a method label")
        for name in self.analyses:
            fitting(name, self.task, SPEC.carries, "experiment.analyses")
        check_options(self.analysis_options)
        if self.selection.enabled:
            sel = self.selection
            require(sel.method in self.methods, f"selection.method {sel.method!r} is not a method label")
            require(not sel.setting or sel.setting in self.settings,
                    f"selection.setting {sel.setting!r} is not a setting")
            require(sel.metric == "bleu",
                    f"selection.metric for translation is bleu (validation BLEU), got {sel.metric!r}")
        require(len(self.splits) >= 1, "experiment.splits must not be empty")
        require(set(self.greedy_splits) <= set(self.splits) and len(set(self.greedy_splits)) == len(self.greedy_splits),
                f"experiment.greedy_splits must be distinct splits of experiment.splits {self.splits}, "
                f"got {self.greedy_splits}")
        self.tune_length_penalty = [float(a) for a in self.tune_length_penalty]
        require(all(a >= 0 for a in self.tune_length_penalty)
                and len(set(self.tune_length_penalty)) == len(self.tune_length_penalty),
                f"experiment.tune_length_penalty must be distinct values >= 0, got {self.tune_length_penalty}")
        self.tune_length_penalty_max = float(self.tune_length_penalty_max)
        require(not self.tune_length_penalty or self.tune_length_penalty_max >= max(self.tune_length_penalty),
                f"experiment.tune_length_penalty_max must be >= the largest α of tune_length_penalty "
                f"({max(self.tune_length_penalty, default=0):g}), got {self.tune_length_penalty_max:g}")
        for label in list(self.methods) + list(self.settings):
            require(label.replace("-", "").replace("_", "").replace(".", "").isalnum(),
                    f"experiment label {label!r}: use letters, digits, -, _ or .")

    def skip_reason(self, analysis: str) -> str:
        """Why ``analysis`` cannot run on this grid (it is skipped with this note), or ""."""
        return skip_reason(analysis, list(self.methods))

    @property
    def root(self) -> Path:
        return Path(self.out_dir or f"runs/{self.name}")

    @property
    def baseline_label(self) -> str:
        return self.baseline or next(iter(self.methods))

    def with_methods(self, labels: list[str]) -> ExperimentConfig:
        """The same grid restricted to the methods ``labels``, in that order (the first is the
        baseline unless the grid's own baseline is kept); its selection stage stays only when the
        method it selects for is kept (:meth:`~posenc.experiments.experiment.Experiment.with_methods`).
        A label the grid does not have is a one-line error."""
        return experiment_of(self).with_methods(labels).options


#: What a selection sweep scores on (``Experiment.sweep_options``): the validation split only, no
#: greedy decoding, no analyses and no baseline (it has no report of its own).
SWEEP_OPTIONS: dict[str, Any] = {"splits": ["valid"], "greedy_splits": [], "analyses": [], "baseline": ""}


def experiment_of(exp: ExperimentConfig) -> Experiment:
    """The grid of ``exp``: settings (its outer axis, whose overrides apply before the method's) ×
    methods × seeds over ``exp.base``, each cell's run config naming its setting's prepared data
    (:func:`with_data_dir`); run directories ``root/setting/method/seedN``. A grid derived from it
    (a selection sweep, scored as :data:`SWEEP_OPTIONS` say; the grid with the chosen value) has
    the experiment config of its axes (:func:`config_of`).

    Args:
        exp: the experiment config.

    Returns:
        The :class:`~posenc.experiments.experiment.Experiment` (its ``options``: ``exp``).
    """
    return Experiment(exp.name, exp.task, exp.root, RunConfig, exp.base, exp.methods, tuple(exp.seeds),
                      groups=exp.settings, selection=exp.selection, options=exp, finish=with_data_dir,
                      options_of=config_of, sweep_options=SWEEP_OPTIONS)


def config_of(grid: Experiment) -> ExperimentConfig:
    """The experiment config of a grid derived from one of this schema: its methods, settings,
    seeds and selection written into the config it came from; its baseline kept where the grid
    still has that method.

    Args:
        grid: the derived grid (its ``options``: the config of the grid it came from).

    Returns:
        The experiment config whose :func:`experiment_of` is ``grid``'s cells and run configs.
    """
    options = grid.options
    return replace(options, methods=dict(grid.methods), settings=dict(grid.groups), seeds=list(grid.seeds),
                   baseline=options.baseline if options.baseline in grid.methods else "",
                   selection=grid.selection or SelectionConfig())


def with_data_dir(grid: Experiment, cell: Cell, cfg: RunConfig) -> RunConfig:
    """``cfg`` with its setting's prepared data directory, one per data config under the grid's
    :func:`data_root` (``<setting>-<hash of the data config>``).

    Args:
        grid: the experiment.
        cell: the cell (its group is its setting).
        cfg: its run config.

    Returns:
        ``cfg`` with its ``data_dir``.
    """
    key = hashlib.sha256(json.dumps(to_dict(cfg.data), sort_keys=True).encode()).hexdigest()[:8]
    return replace(cfg, data_dir=str(data_root(grid) / f"{cell.group}-{key}"))


def run_config(exp: ExperimentConfig, setting: str, method: str, seed: int) -> RunConfig:
    """The run config of one cell of ``exp`` (:func:`experiment_of`).

    Args:
        exp: the experiment config.
        setting: the cell's setting.
        method: its method label.
        seed: its seed.

    Returns:
        The run config.
    """
    return experiment_of(exp).run_config((setting, method, seed))


def data_root(exp: Any) -> Path:
    """Where an experiment keeps the prepared data of its settings (and their SentencePiece cache).

    Args:
        exp: the experiment config, or its grid.

    Returns:
        ``<root>/data``.
    """
    return exp.root / "data"
