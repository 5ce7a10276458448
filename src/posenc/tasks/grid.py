"""The experiment side shared by every task: one routine that brings a cell up to date
(:class:`GridTask`: scored as stored, or trained through :func:`posenc.tasks.base.run_task`, then
scored by the task), run by the shared grid runner (:mod:`posenc.experiments.runner`: ``--jobs``,
freshness, ``--rerun-stale``); and the grids of methods × seeds over one base run config (vision,
speech, lengthgen): their experiment schema and :class:`MethodsGrid`.

An experiment YAML::

    task: vision
    name: fashion_mnist_small
    base: {model: ..., data: ..., train: ...}      # one run config of the task
    methods:                                       # label -> dotted overrides of base
      cape-2d: {model.position.name: cape-2d}
    seeds: [0]

Layout under ``exp.root`` (``out_dir``, default ``runs/NAME``): ``<method>/seed<N>/`` (a run
directory; ``results.json`` once done; no level of a group: the grid has no outer axis) and
``report/``. A task may add an outer axis (:meth:`MethodsGrid.groups`: lengthgen's algorithmic
tasks, ``<task>/<method>/seed<N>/``).
"""

from __future__ import annotations

import abc
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from posenc.config import require, require_seeds
from posenc.errors import RunDirError
from posenc.experiments.cell import recorded_verdict, results_path
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.tasks import ExperimentTask
from posenc.runs.same_run import RunRecord, Verdict
from posenc.tasks.base import TaskRun, run_task

log = logging.getLogger("posenc")

__all__ = ["GridTask", "MethodsExperimentConfig", "MethodsGrid", "Trained", "methods_experiment"]

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
    """A cell's run as the cell routine (:meth:`GridTask.run_cell`) hands it to the task's scoring.

    Attributes:
        run: the run trained (or, finished, evaluated) in this process; None when it is scored
            from its files (rescored, or trained elsewhere).
        summary: its summary (``summary.json``'s entries).
        verdict: the verdict on the run, handed to checkpoint loading (judged once).
    """

    run: TaskRun | None
    summary: dict[str, Any]
    verdict: Verdict | None


class GridTask(ExperimentTask):
    """An :class:`~posenc.experiments.tasks.ExperimentTask` whose cells are brought up to date by one
    routine (:meth:`run_cell`): a run whose training ended elsewhere (:meth:`stored_training`) or
    whose verdict is ``rescore`` is scored as it is; any other trains (resuming, or extending its
    caps) through :func:`~posenc.tasks.base.run_task`, the one training path; then the task scores
    it (:meth:`score`). A task defines ``new_task`` (the :class:`~posenc.tasks.base.Task` that trains
    one run), ``experiment``, ``score``, ``summary_line`` and ``report``."""

    def verdict(self, exp: Experiment, cell: Cell, results: dict[str, Any] | None) -> Verdict | None:
        """:func:`recorded_verdict` of the cell's run config (a task that scores its cells adds its
        evaluation)."""
        return recorded_verdict(exp.run_config(cell), results)

    def run_cell(self, exp: Experiment, cell: Cell, verdict: Verdict | None,
                 old: dict[str, Any] | None) -> dict[str, Any]:
        """:meth:`run_cell_config` of the cell's run config."""
        return self.run_cell_config(exp, cell, exp.run_config(cell), verdict, old)

    def run_cell_config(self, exp: Experiment, cell: Cell, cfg: Any, verdict: Verdict | None = None,
                        old: dict[str, Any] | None = None) -> dict[str, Any]:
        """Bring the run ``cfg`` of ``cell`` up to date with its verdict and score it.

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
            run = run_task(self.new_task(), cfg, verdict=verdict)
            summary = run.summary
        results_path(cfg).unlink(missing_ok=True)  # never old numbers next to a changed run
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

    @abc.abstractmethod
    def score(self, exp: Experiment, cell: Cell, cfg: Any, trained: Trained) -> dict[str, Any]:
        """The cell's results: its scores, summary and the record they were taken with.

        Args:
            exp: the experiment.
            cell: the cell.
            cfg: its run config.
            trained: its run, trained or stored (:class:`Trained`).

        Returns:
            What its ``results.json`` stores (JSON-safe).
        """


class MethodsGrid(GridTask):
    """The :class:`GridTask` of a methods × seeds grid. A task sets ``experiment_config`` and
    ``run_config`` (its schemas; a run config has a ``data`` section, :meth:`data_check`'s argument)
    and defines ``new_task``, ``summary_line`` and ``report``; :meth:`results` may add to a cell's
    results."""

    experiment_config: ClassVar[type] = MethodsExperimentConfig

    def experiment(self, options: MethodsExperimentConfig) -> Experiment:
        """:func:`methods_experiment` of ``options``, with the outer axis of :meth:`groups`."""
        return methods_experiment(options, self.run_config, self.groups(options))

    def groups(self, options: MethodsExperimentConfig) -> dict[str, dict[str, Any]]:
        """The grid's outer axis: label → dotted overrides (default: none, a grid of methods × seeds)."""
        return {}

    def check_data(self, exp: Experiment, cells: list[Cell]) -> None:
        """The data of ``cells`` checked once per distinct data config (:meth:`data_check`), before
        any run or worker starts: a missing data set stops the grid in one line."""
        seen: set[str] = set()
        for cell in cells:
            data = exp.run_config(cell).data
            if repr(data) not in seen:
                seen.add(repr(data))
                self.data_check(data)

    def data_check(self, data: Any) -> None:
        """A one-line DataError when the data of a run's ``data`` config are not at hand (default:
        nothing to check, e.g. generated data)."""

    def score(self, exp: Experiment, cell: Cell, cfg: Any, trained: Trained) -> dict[str, Any]:
        """What ``results.json`` stores: the cell (its group as ``task``; the grid's task where it has
        no outer axis), the run's record (:meth:`RunRecord.of`, as in its fingerprint.json), a
        summary with the trainer's stop reason and convergence status
        (:mod:`posenc.training.convergence`) and the metrics of the task's evaluation; :meth:`results`
        may add to them.

        Raises:
            RunDirError: the cell comes without its run (a ``rescore`` verdict or a stored training):
                a methods grid scores a cell only from the run it trains.
        """
        run = trained.run
        if run is None:
            why = f" ({trained.verdict.kind}: {trained.verdict.detail})" if trained.verdict is not None else ""
            raise RunDirError(f"cell {Cell(*cell).label}: {type(self).__name__} scores a cell only by training "
                              f"it, never a stored run{why}")
        s, conv = run.result.state, run.result.summary()
        summary = {"steps": s.step, "wall_s": round(s.wall_s, 2), "params": run.summary.get("params"),
                   **{k: conv[k] for k in ("stopped", "status", "converged") if k in conv}}
        done = {"task": cell.group or exp.task, "method": cell.method, "seed": cell.seed,
                "record": RunRecord.of(cfg).to_dict(), "summary": summary, "metrics": run.metrics}
        return self.results(done, run)

    def results(self, done: dict[str, Any], run: TaskRun) -> dict[str, Any]:
        """A cell's results; a task may add to them (default: unchanged)."""
        return done
