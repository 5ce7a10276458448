"""The grid side of a task (:class:`TaskGrid`): everything the shared grid runner
(:mod:`posenc.experiments.runner`, its scheduler, queue and merge) asks of a task, declared here,
below the tasks, with the defaults of a grid of methods × seeds over one base run config.
:class:`posenc.tasks.base.Task` subclasses it, so a task is one class of one protocol: its run side
(model, batches, loss, evaluation) and its grid side.

A cell is brought up to date by one routine (:meth:`TaskGrid.run_cell`): scored as stored, or
trained through :meth:`TaskGrid.train` (the task's one training path,
:func:`posenc.tasks.base.run_task`), then scored by the task (:meth:`TaskGrid.score`).

An experiment YAML of the default schema (:class:`MethodsExperimentConfig`)::

    task: vision
    name: fashion_mnist_small
    base: {model: ..., data: ..., train: ...}      # one run config of the task
    methods:                                       # label -> dotted overrides of base
      cape-2d: {model.position.name: cape-2d}
    seeds: [0]

Layout under ``exp.root`` (``out_dir``, default ``runs/NAME``): ``<method>/seed<N>/`` (a run
directory; ``results.json`` once done; no level of a group: the grid has no outer axis) and
``report/``. A task may add an outer axis (:meth:`TaskGrid.groups`: lengthgen's algorithmic
tasks, ``<task>/<method>/seed<N>/``) or its own experiment schema and grid (translation).
"""

from __future__ import annotations

import abc
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from posenc.config import require, require_seeds
from posenc.errors import ConfigError, RunDirError
from posenc.experiments.cell import recorded_verdict, results_path
from posenc.experiments.experiment import Cell, Experiment
from posenc.runs.same_run import RunRecord, Verdict, scoring_of

log = logging.getLogger("posenc")

__all__ = ["MethodsExperimentConfig", "TaskGrid", "Trained", "methods_experiment"]

#: The form of an experiment's methods, told where none is given (one line).
METHODS_FORM = ("`methods:` maps label -> dotted overrides of `base:`, e.g. `methods: {cape: {model.position.name: "
                "cape}}` (docs/architecture.md, 'A task')")


@dataclass
class MethodsExperimentConfig:
    """methods × seeds over a ``base`` run config; ``methods`` maps label → dotted overrides."""

    name: str = "experiment"
    task: str = ""
    out_dir: str = ""  # default runs/NAME
    description: str = ""
    base: dict[str, Any] = field(default_factory=dict)
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=lambda: [0])

    def __post_init__(self) -> None:
        require(len(self.methods) >= 1, f"experiment {self.name}: give at least one method ({METHODS_FORM})")
        require(len(self.seeds) >= 1 and len(set(self.seeds)) == len(self.seeds),
                "experiment.seeds must be distinct and non-empty")
        require_seeds(self.seeds, "experiment.seeds")
        for label, over in self.methods.items():
            require(label.replace("-", "").replace("_", "").replace("+", "").isalnum(),
                    f"method label {label!r}: use letters, digits, -, _ or +")
            require(isinstance(over, dict), f"methods.{label}: a mapping of dotted overrides, got {over!r}")

    @property
    def root(self) -> Path:
        return Path(self.out_dir or f"runs/{self.name}")


def methods_experiment(options: MethodsExperimentConfig, run_schema: type,
                       groups: dict[str, dict[str, Any]] | None = None) -> Experiment:
    """The grid of a methods × seeds experiment config.

    Args:
        options: the experiment config.
        run_schema: the task's run config class.
        groups: an outer axis, label → dotted overrides applied after the method's (None: none).

    Returns:
        The :class:`~posenc.experiments.experiment.Experiment` (its ``options``: ``options``).
    """
    return Experiment(options.name, options.task, options.root, run_schema, options.base, options.methods,
                      tuple(options.seeds), groups=groups or {}, group_last=True, options=options)


@dataclass(frozen=True)
class Trained:
    """A cell's run as the cell routine (:meth:`TaskGrid.run_cell`) hands it to the task's scoring.

    Attributes:
        run: the run trained (or, finished, evaluated) in this process (a
            :class:`~posenc.tasks.base.TaskRun`); None when it is scored from its files (rescored,
            or trained elsewhere).
        summary: its summary (``summary.json``'s entries).
        verdict: the verdict on the run, handed to checkpoint loading (judged once).
    """

    run: Any
    summary: dict[str, Any]
    verdict: Verdict | None


class TaskGrid(abc.ABC):
    """The grid side of a task: what the runner asks of it. A task (:class:`posenc.tasks.base.Task`,
    which subclasses this class and trains a run, :meth:`train`) defines ``new_task``,
    ``summary_line`` and ``report`` and sets ``run_config`` (its run schema; a run config has a
    ``data`` section, :meth:`data_check`'s argument); every other method has the default of a
    methods × seeds grid, which a task overrides where its grid differs (translation: its own
    schema, freshness and scoring)."""

    #: The experiment schema (a dataclass with ``task``, ``root``, methods and seeds).
    experiment_config: ClassVar[type] = MethodsExperimentConfig
    #: The schema of one run (a cell's config; what ``posenc train`` reads).
    run_config: ClassVar[type]

    # ------------------------------------------------------------------ what every task defines
    @abc.abstractmethod
    def new_task(self) -> Any:
        """A fresh :class:`~posenc.tasks.base.Task` that trains one run of :attr:`run_config`
        (``posenc train``; one per cell).

        Returns:
            The task object.
        """

    @abc.abstractmethod
    def train(self, cfg: Any, verdict: Verdict | None) -> Any:
        """Train (resuming) and evaluate the run ``cfg`` of a cell: the task's one training path.

        Args:
            cfg: the cell's run config.
            verdict: the verdict on the run in its directory, judged once (None: nothing recorded).

        Returns:
            The trained run (a :class:`~posenc.tasks.base.TaskRun`: model, Trainer result,
            metrics, summary).
        """

    @abc.abstractmethod
    def summary_line(self, exp: Experiment, result: dict[str, Any]) -> str:
        """One line printed as a run finishes.

        Args:
            exp: the experiment.
            result: the cell's results.

        Returns:
            The line.
        """

    @abc.abstractmethod
    def report(self, exp: Experiment, results: list[dict[str, Any]]) -> Path:
        """Write the report of the grid.

        Args:
            exp: the experiment.
            results: every cell's results (with ``--report-only`` only the fresh cells', possibly
                none of a setting or method).

        Returns:
            The report's directory.
        """

    # ------------------------------------------------------------------ the grid, with defaults
    def experiment(self, options: Any) -> Experiment:
        """The grid of an experiment config: its base, axes, seeds and selection as data (default:
        :func:`methods_experiment` of ``options``, with the outer axis of :meth:`groups`).

        Args:
            options: the experiment config (an :attr:`experiment_config`).

        Returns:
            The :class:`~posenc.experiments.experiment.Experiment` (its ``options``: ``options``),
            whose cells and run configs the runner uses.
        """
        return methods_experiment(options, self.run_config, self.groups(options))

    def groups(self, options: Any) -> dict[str, dict[str, Any]]:
        """The grid's outer axis: label → dotted overrides (default: none, a grid of methods × seeds)."""
        return {}

    def verdict(self, exp: Experiment, cell: Cell, results: dict[str, Any] | None) -> Verdict | None:
        """How the cell's stored results relate to the current config: :func:`recorded_verdict` of
        the cell's run config, scored as :meth:`evaluation` says (a change of it: ``rescore``).

        Args:
            exp: the experiment.
            cell: the cell.
            results: its stored ``results.json`` (None: none yet).

        Returns:
            The verdict, or None when the cell has to run (no results, nothing stale).
        """
        cfg = exp.run_config(cell)
        return recorded_verdict(cfg, results, self.evaluation(cfg))

    def evaluation(self, cfg: Any) -> dict[str, Any] | None:
        """How a cell of run config ``cfg`` is scored, recorded with its results and judged by
        :meth:`verdict` (default: its task's scoring sections,
        :func:`~posenc.runs.same_run.scoring_of`; None where it declares none).

        Args:
            cfg: the cell's run config.

        Returns:
            The evaluation its results record (JSON-safe), or None.
        """
        return scoring_of(cfg)

    # ------------------------------------------------------------------ bringing a cell up to date
    def run_cell(self, exp: Experiment, cell: Cell, verdict: Verdict | None,
                 old: dict[str, Any] | None) -> dict[str, Any]:
        """Train (resuming) and/or evaluate the cell: :meth:`run_cell_config` of its run config.

        Args:
            exp: the experiment.
            cell: the cell.
            verdict: its :meth:`verdict`; without results, the verdict on the run started in its
                directory, which resumes with it (None: nothing recorded, it runs afresh).
            old: its stored results (None: none).

        Returns:
            Its results, JSON-safe (the runner stores them).
        """
        return self.run_cell_config(exp, cell, exp.run_config(cell), verdict, old)

    def run_cell_config(self, exp: Experiment, cell: Cell, cfg: Any, verdict: Verdict | None = None,
                        old: dict[str, Any] | None = None) -> dict[str, Any]:
        """Bring the run ``cfg`` of ``cell`` up to date with its verdict and score it: a run whose
        training ended elsewhere (:meth:`stored_training`) or whose verdict is ``rescore`` is scored
        as it is; any other trains (resuming, or extending its caps) through :meth:`train`.

        Args:
            exp: the experiment.
            cell: the cell.
            cfg: its run config.
            verdict: its verdict (without ``old``: on the run started in its directory; None:
                nothing recorded), handed to training and checkpoint loading.
            old: its stored results (None: none).

        Returns:
            Its results (:meth:`score`), JSON-safe.
        """
        stored = self.stored_training(cfg, verdict) if old is None else None
        run, shown = None, Cell(*cell).label
        if stored is not None:
            summary, verdict = stored
            log.info("== %s: training ended (%s at %s) and only its averaged checkpoint is here: scoring it",
                     shown, summary.get("stopped"), summary.get("step"))
        elif verdict is not None and verdict.kind == "rescore":
            summary = (old or {}).get("summary", {})
            log.info("== %s: rescoring (%s)", shown, verdict.detail)
        else:
            if verdict is not None:
                log.info("== %s: %s", shown, f"extending training ({verdict.detail})" if old is not None
                         else f"resuming its run ({verdict.kind})")
            log.info("== %s -> %s", shown, cfg.out_dir)
            run = self.train(cfg, verdict)
            summary = run.summary
        results_path(cfg).unlink(missing_ok=True)  # never old numbers next to a changed run (or rescore)
        return self.score(exp, cell, cfg, Trained(run, summary, verdict))

    def stored_training(self, cfg: Any, verdict: Verdict | None = None) -> tuple[dict[str, Any], Verdict] | None:
        """A finished run of ``cfg`` to score as it is, where the task has a way to (default: none).

        Args:
            cfg: the cell's run config.
            verdict: the verdict on the run its directory records, taken once (None: judge it here).

        Returns:
            Its summary and the verdict on its record, or None (the run trains or resumes).
        """
        return None

    def score(self, exp: Experiment, cell: Cell, cfg: Any, trained: Trained) -> dict[str, Any]:
        """The cell's results, what ``results.json`` stores: the cell (its group as ``task``; the
        grid's task where it has no outer axis), the run's record (:meth:`RunRecord.of`, as in its
        fingerprint.json, with the cell's :meth:`evaluation`), a summary with the trainer's stop
        reason and convergence status (:mod:`posenc.training.convergence`) and the metrics of the
        task's evaluation; :meth:`results` may add to a trained run's. A run scored from its files
        keeps its stored summary and is scored by :meth:`stored_metrics` (which gives every metric
        its results hold: :meth:`results` is not called without a run).

        Args:
            exp: the experiment.
            cell: the cell.
            cfg: its run config.
            trained: its run, trained or stored (:class:`Trained`).

        Returns:
            What its ``results.json`` stores (JSON-safe).
        """
        done = {"task": cell.group or exp.task, "method": cell.method, "seed": cell.seed,
                "record": RunRecord.of(cfg, self.evaluation(cfg)).to_dict()}
        run = trained.run
        if run is None:
            return {**done, "summary": trained.summary, "metrics": self.stored_metrics(cell, cfg, trained)}
        s, conv = run.result.state, run.result.summary()
        summary = {"steps": s.step, "wall_s": round(s.wall_s, 2), "params": run.summary.get("params"),
                   **{k: conv[k] for k in ("stopped", "status", "converged") if k in conv}}
        return self.results({**done, "summary": summary, "metrics": run.metrics}, run)

    def stored_metrics(self, cell: Cell, cfg: Any, trained: Trained) -> dict[str, Any]:
        """The metrics of a cell's run scored from its files (a ``rescore`` verdict, or a training
        that ended elsewhere), where the task has a way to (default: none).

        Args:
            cell: the cell.
            cfg: its run config.
            trained: its stored run (no run in this process; the verdict on it, judged once).

        Returns:
            The metrics, as its training's evaluation gives them.

        Raises:
            RunDirError: by default: a cell is scored only from the run it trains.
        """
        why = f" ({trained.verdict.kind}: {trained.verdict.detail})" if trained.verdict is not None else ""
        raise RunDirError(f"cell {Cell(*cell).label}: {type(self).__name__} scores a cell only by training "
                          f"it, never a stored run{why}")

    def results(self, done: dict[str, Any], run: Any) -> dict[str, Any]:
        """A cell's results as :meth:`score` made them, from its trained ``run``; a task may add to
        them (default: unchanged)."""
        return done

    # ------------------------------------------------------------------ optional stages
    def check_data(self, exp: Experiment, cells: list[Cell]) -> None:
        """Check that the data of ``cells`` are at hand, before any run or worker starts: by default
        once per distinct data config (:meth:`data_check`), so a missing data set stops the grid in
        one line.

        Args:
            exp: the experiment.
            cells: the cells about to run.

        Raises:
            DataError: one line naming what is missing.
        """
        seen: set[str] = set()
        for cell in cells:
            data = exp.run_config(cell).data
            if repr(data) not in seen:
                seen.add(repr(data))
                self.data_check(data)

    def data_check(self, data: Any) -> None:
        """A one-line DataError when the data of a run's ``data`` config are not at hand (default:
        nothing to check, e.g. generated data)."""
        return None

    def prepare(self, exp: Experiment, cells: list[Cell]) -> None:
        """Prepare what ``cells`` share before any of them runs (e.g. data prepared once per
        setting; default: nothing).

        Args:
            exp: the experiment.
            cells: the cells about to run.
        """
        return None

    def check_carried(self, exp: Experiment, cell: Cell, results: dict[str, Any],
                      run_dir: Path) -> tuple[str, str | None]:
        """Judge the scores of a cell trained elsewhere and brought back (``posenc experiment --merge``).

        Args:
            exp: the experiment.
            cell: the cell.
            results: the results it carries.
            run_dir: its carried run directory.

        Returns:
            ``(what became of its scores, why they do not hold here or None)``; by default they
            are taken as carried (a task whose runs carry no outputs to recompute them from).
        """
        return "scores as carried: its task carries no outputs to recompute them from", None

    def selection_score(self, result: dict[str, Any], metric: str) -> float:
        """A selection sweep cell's validation ``metric`` (:mod:`posenc.experiments.selection`; the
        sweep itself is the grid's, :meth:`~posenc.experiments.experiment.Experiment.sweep`, scored
        on what its ``sweep_options`` say).

        Args:
            result: the sweep cell's results.
            metric: the selection's metric name.

        Returns:
            Its value. By default a task has no selection stage (a one-line ConfigError).
        """
        raise ConfigError("this experiment task has no selection stage")
