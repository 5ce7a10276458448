"""A selection stage before the test grid: one hyperparameter chosen on a
validation metric, the way SHAPE App. B chose K (validation BLEU over {10, 20, 30, 40, 100, 500},
one seed, one setting), then the test grid run with the chosen value.

The experiment YAML's ``selection:`` block names the dotted run-config ``key`` to sweep, its
``values``, the ``method`` label whose overrides it extends (that method of the test grid then gets
the chosen value; pinned values are simply other methods, e.g. ``shape-k500``), the ``setting`` and
``seeds`` it is chosen on and the validation ``metric``. The runner knows no task: the grid itself
(an :class:`~posenc.experiments.experiment.Experiment`) builds the sweep (``Experiment.sweep``: one
method per value, scored as its ``sweep_options`` say, e.g. translation's validation split only)
and the test grid with the chosen value (``Experiment.with_value``); the task says only how a sweep
cell is scored (:meth:`~posenc.experiments.task_grid.TaskGrid.selection_score`).

The sweep's cells are ordinary resumable grid cells beside the grid's
(``<root>/<setting>/<method>-<key><value>/seedN``); the choice (the
value of the best mean over the seeds, ties: the first listed) and every score are written to
``<root>/selection/selection.json`` for the report.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posenc.config import require
from posenc.files import atomic_write_text

if TYPE_CHECKING:
    from posenc.experiments.experiment import Experiment

SELECTION_FILE = "selection.json"


@dataclass
class SelectionConfig:
    """The ``selection:`` block of an experiment (empty ``key``: no selection stage)."""

    key: str = ""  # dotted run-config key, e.g. model.position.max_shift
    values: list[Any] = field(default_factory=list)
    method: str = ""  # method label whose overrides are swept and which gets the chosen value
    setting: str = ""  # setting the value is chosen on (default: the experiment's first)
    seeds: list[int] = field(default_factory=list)  # default: the experiment's first seed
    metric: str = "bleu"  # the validation metric (translation: BLEU of the validation split)
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if not self.key:
            return
        require(len(self.values) >= 2 and len({json.dumps(v) for v in self.values}) == len(self.values),
                f"selection.values must be at least two distinct values, got {self.values}")
        require(bool(self.method), "selection.method: name the method label whose value is selected")
        require(len(set(self.seeds)) == len(self.seeds), f"selection.seeds must be distinct, got {self.seeds}")

    @property
    def enabled(self) -> bool:
        return bool(self.key)

    def label(self, value: Any) -> str:
        """The sweep cell's method label for ``value`` (``shape-max_shift40``)."""
        return f"{self.method}-{self.key.rsplit('.', 1)[-1]}{value}"


def best_value(sel: SelectionConfig, means: dict[str, float]) -> Any:
    """The value of the best mean score (ties: the first listed in ``sel.values``)."""
    sign = 1.0 if sel.higher_is_better else -1.0
    order = list(range(len(sel.values)))
    best = max(order, key=lambda i: (sign * means[sel.label(sel.values[i])], -i))
    return sel.values[best]


def choose(sel: SelectionConfig, results: list[dict[str, Any]],
           score: Callable[[dict[str, Any], str], float]) -> dict[str, Any]:
    """The selection record: per value the seeds' validation scores and their mean, and the chosen value."""
    per_value: dict[str, list[float]] = {sel.label(v): [] for v in sel.values}
    for r in sorted(results, key=lambda r: r["seed"]):
        per_value[r["method"]].append(float(score(r, sel.metric)))
    means = {label: statistics.fmean(s) for label, s in per_value.items()}
    rows = [{"value": v, "label": sel.label(v), "scores": per_value[sel.label(v)], "mean": means[sel.label(v)]}
            for v in sel.values]
    return {"key": sel.key, "method": sel.method, "setting": sel.setting, "seeds": sel.seeds, "metric": sel.metric,
            "higher_is_better": sel.higher_is_better, "rows": rows, "chosen": best_value(sel, means)}


def selection_path(exp: Any) -> Path:
    return Path(exp.root) / "selection" / SELECTION_FILE


def read_selection(exp: Any) -> dict[str, Any] | None:
    """The stored selection record of ``exp`` (None when it has none)."""
    path = selection_path(exp)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def resolved(exp: Experiment) -> SelectionConfig:
    """``exp.selection`` with its defaults filled in: the grid's first group (``""`` in a grid
    without an outer axis) and its first seed.

    Args:
        exp: the grid.

    Returns:
        The selection with its ``setting`` and ``seeds``.
    """
    sel = exp.selection
    setting = sel.setting or next(iter(exp.groups or {"": None}))
    return replace(sel, setting=setting, seeds=list(sel.seeds) or [exp.seeds[0]])


def run_selection(exp: Experiment, task: Any,
                  bring_up_to_date: Callable[[Experiment], list[dict[str, Any]]]) -> Experiment:
    """Run the sweep (``bring_up_to_date(sweep)`` trains/scores its cells and returns their results),
    record the choice and return the test grid with it; ``exp`` itself when it selects nothing.

    Args:
        exp: the grid.
        task: its task (:meth:`~posenc.experiments.task_grid.TaskGrid.selection_score`).
        bring_up_to_date: brings a grid's cells up to date and returns their results.

    Returns:
        The test grid with the chosen value, or ``exp``.
    """
    sel = exp.selection
    if sel is None or not sel.enabled:
        return exp
    sel = resolved(exp)
    chosen = apply_choice(exp, task, bring_up_to_date(exp.sweep(sel)))
    record = read_selection(exp) or {}
    print(f"selection: {sel.key} = {record['chosen']} (validation {sel.metric}; "
          + ", ".join(f"{row['value']}: {row['mean']:.2f}" for row in record["rows"]) + ")", flush=True)
    return chosen


def with_choice(exp: Experiment, task: Any, results: list[dict[str, Any]]) -> tuple[Experiment, dict[str, Any]]:
    """The test grid with the choice of the complete sweep ``results`` and the selection record
    (nothing written)."""
    record = choose(resolved(exp), results, task.selection_score)
    return exp.with_value(record["chosen"]), record


def apply_choice(exp: Experiment, task: Any, results: list[dict[str, Any]]) -> Experiment:
    """The test grid with the choice of the complete sweep ``results``, recorded in ``selection.json``."""
    chosen, record = with_choice(exp, task, results)
    selection_path(exp).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(selection_path(exp), json.dumps(record, indent=2))
    return chosen


def selection_lines(exp: Any) -> list[str]:
    """The report's section: the validation sweep table and the chosen value (none: [])."""
    record = read_selection(exp)
    sel = getattr(exp, "selection", None)
    if record is None or sel is None or not sel.enabled:
        return []
    seeds = record["seeds"]
    lines = [f"## Selection of `{record['key']}` on validation", "",
             f"Chosen on setting `{record['setting']}`, seed(s) {seeds}, by validation {record['metric']} "
             f"({'higher' if record['higher_is_better'] else 'lower'} is better; the best mean over the seeds, "
             "ties: the first listed). The test split is not decoded in the sweep. "
             f"**Chosen: {record['chosen']}**, used by method `{record['method']}` in the table above.", "",
             "| value | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | |", "|---|" + "---|" * (len(seeds) + 2)]
    for row in record["rows"]:
        mark = "chosen" if row["value"] == record["chosen"] else ""
        lines.append(f"| {row['value']} | " + " | ".join(f"{v:.2f}" for v in row["scores"])
                     + f" | {row['mean']:.2f} | {mark} |")
    return lines + [""]
