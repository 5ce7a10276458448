"""An experiment grid as data (:class:`Experiment`): a base run config, named axes (label →
dotted overrides), seeds and an optional selection stage; its cells (:class:`Cell`) and each
cell's run config and run directory follow from these alone, the same way for every task.

A grid has methods and seeds, and may have one outer axis (translation's data settings,
lengthgen's algorithmic tasks): then a cell's run directory is ``root/group/method/seedN``, else
``root/method/seedN`` and a cell has no group (``""``). A task turns its experiment YAML (its
typed experiment config, kept as :attr:`Experiment.options` for what only the task reads: splits,
analyses, ...) into an :class:`Experiment`; the runner knows only this value. The grids a
selection stage needs (:mod:`posenc.experiments.selection`: its validation sweep, the grid with the
chosen value) and a grid of fewer methods are derived from it here, the same way for every task.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from posenc.config import apply_mapping, from_dict
from posenc.errors import ConfigError


def cell_run_config(schema: type, base: dict[str, Any], overrides: Sequence[dict[str, Any]], seed: int,
                    out_dir: str | Path) -> Any:
    """A cell's run config, the one way every task writes it: ``base`` with each mapping of dotted
    ``overrides`` applied in order (a setting's, a method's, ...), then the cell's seed and run
    directory, validated by the task's run schema.

    Args:
        schema: the run config class.
        base: the experiment's base run config (a mapping).
        overrides: mappings of dotted overrides, applied in order (a later one wins).
        seed: the cell's ``train.seed``.
        out_dir: the cell's run directory.

    Returns:
        The run config (a ``schema``).
    """
    data = base
    for mapping in overrides:
        data = apply_mapping(data, mapping, schema)
    return from_dict(schema, apply_mapping(data, {"train.seed": seed, "out_dir": str(out_dir)}, schema))


class Cell(NamedTuple):
    """One run of an experiment grid, as the runner passes it around (log names, worker argv,
    results paths). ``group`` is the label on the grid's outer axis (translation's data setting,
    lengthgen's algorithmic task), ``""`` in a grid without one (vision, speech)."""

    group: str
    method: str
    seed: int

    @property
    def name(self) -> str:
        """``group/method/seed``, or ``method/seed`` without a group (listings, messages)."""
        return "/".join(map(str, self if self.group else self[1:]))

    @property
    def label(self) -> str:
        """The run directory relative to the grid's root, ``group/method/seedN`` or ``method/seedN``
        without a group: how progress, failure and log lines name the cell."""
        return "/".join([*([self.group] if self.group else []), self.method, f"seed{self.seed}"])

    @property
    def log_name(self) -> str:
        """The stem of the cell's worker log: ``group-method-seedN``, or ``method-seedN``."""
        return "-".join([*([self.group] if self.group else []), self.method, f"seed{self.seed}"])


@dataclass(frozen=True)
class Experiment:
    """One experiment grid: every cell is ``base`` with the overrides of its group (outer axis)
    and method, then its seed and run directory (:func:`cell_run_config`).

    Attributes:
        name: the experiment's name (reports, messages).
        task: the ``task:`` reference of its YAML.
        root: its output directory: the cells' run directories, ``report/``, ``logs/``.
        run_schema: the run config class of the task (what ``posenc train`` reads).
        base: the base run config, a mapping.
        methods: method label → dotted overrides of ``base``.
        seeds: the seeds of every (group, method).
        groups: outer-axis label → dotted overrides (empty: a grid without an outer axis).
        group_last: the group's overrides apply after the method's (else before).
        selection: the selection stage (:mod:`posenc.experiments.selection`; None: none).
        options: the task's typed experiment config it came from (read by the task only).
        finish: the task's completion of a cell's run config, after overrides, seed and run
            directory (e.g. where its prepared data are); None: none.
        options_of: the task's typed config of a grid derived from this one (:meth:`sweep`,
            :meth:`with_value`, :meth:`with_methods`): its methods, groups, seeds and selection
            written back into :attr:`options`, so that what the task reads (and a worker process
            rebuilds the grid from) is that grid; None: :attr:`options` kept as they are.
        sweep_options: what a selection sweep scores on: fields of :attr:`options` replaced in
            its sweep's (translation: the validation split only); empty: the grid's own.
    """

    name: str
    task: str
    root: Path
    run_schema: type
    base: Mapping[str, Any]
    methods: Mapping[str, Mapping[str, Any]]
    seeds: tuple[int, ...]
    groups: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    group_last: bool = False
    selection: Any = None
    options: Any = None
    finish: Callable[[Experiment, Cell, Any], Any] | None = None
    options_of: Callable[[Experiment], Any] | None = None
    sweep_options: Mapping[str, Any] = field(default_factory=dict)

    def cells(self) -> list[Cell]:
        """Every cell, in report order: group-major, then method, then seed.

        Returns:
            The cells (group ``""`` in a grid without an outer axis).
        """
        return [Cell(group, method, seed) for group in (self.groups or [""]) for method in self.methods
                for seed in self.seeds]

    def run_dir(self, cell: tuple[str, str, int]) -> Path:
        """The run directory of ``cell``.

        Args:
            cell: a cell of the grid.

        Returns:
            ``root/group/method/seedN``, or ``root/method/seedN`` without a group.
        """
        group, method, seed = cell
        return self.root.joinpath(*([group] if group else []), method, f"seed{seed}")

    def run_config(self, cell: tuple[str, str, int]) -> Any:
        """The validated run config of ``cell``.

        Args:
            cell: a cell of the grid.

        Returns:
            A :attr:`run_schema`: base, then the group's and method's overrides (in the grid's
            order), the seed and :meth:`run_dir`; completed by :attr:`finish` where the task has one.

        Raises:
            ConfigError: the cell names no group or method of the grid, or its config is invalid.
        """
        cell = Cell(*cell)
        if cell.method not in self.methods or (cell.group not in self.groups if self.groups else cell.group):
            raise ConfigError(f"experiment {self.name}: no cell {cell.name}")
        overrides = [self.methods[cell.method]]
        if self.groups:
            group = self.groups[cell.group]
            overrides = overrides + [group] if self.group_last else [group] + overrides
        cfg = cell_run_config(self.run_schema, dict(self.base), overrides, cell.seed, self.run_dir(cell))
        return cfg if self.finish is None else self.finish(self, cell, cfg)

    def sweep(self, sel: Any) -> Experiment:
        """The validation sweep of a selection stage: one method per value, scored as
        :attr:`sweep_options` say, without a selection of its own; its run directories lie beside
        the grid's (``root/group/<method>-<key><value>/seedN``).

        Args:
            sel: the resolved :class:`~posenc.experiments.selection.SelectionConfig` (its
                ``setting`` a group of the grid, or ``""`` without an outer axis, and its seeds).

        Returns:
            The sweep: method ``sel.label(value)`` is the selected method's overrides plus
            ``sel.key: value``, for each value; only ``sel.setting`` and ``sel.seeds``.
        """
        methods = {sel.label(v): {**self.methods[sel.method], sel.key: v} for v in sel.values}
        groups = {sel.setting: self.groups[sel.setting]} if self.groups else {}
        return self._derived(self.sweep_options, methods=methods, groups=groups, seeds=tuple(sel.seeds),
                             selection=None)

    def with_value(self, value: Any) -> Experiment:
        """The grid with a selection stage's chosen value.

        Args:
            value: the chosen value of ``selection.key``.

        Returns:
            The grid whose selected method's overrides set ``selection.key`` to ``value`` (its
            selection kept: the report names the choice).
        """
        sel = self.selection
        return self._derived(methods={**self.methods, sel.method: {**self.methods[sel.method], sel.key: value}})

    def with_methods(self, labels: Sequence[str]) -> Experiment:
        """The same grid restricted to the methods ``labels``, in that order; its selection stage
        stays only when the method it selects for is kept.

        Args:
            labels: distinct method labels of the grid.

        Returns:
            The grid of those methods.

        Raises:
            ConfigError: ``labels`` is empty, repeats a label or names one the grid does not have.
        """
        from posenc.errors import ConfigError

        if not labels or len(set(labels)) != len(labels) or any(label not in self.methods for label in labels):
            raise ConfigError(f"methods must be distinct labels of experiment {self.name} "
                              f"({', '.join(self.methods)}), got {', '.join(labels) or 'none'}")
        sel = self.selection
        kept = sel if sel is not None and getattr(sel, "enabled", True) and sel.method in labels else None
        return self._derived(methods={label: self.methods[label] for label in labels}, selection=kept)

    def _derived(self, scored: Mapping[str, Any] | None = None, **axes: Any) -> Experiment:
        """This grid with ``axes`` (fields of the grid) replaced and its options rewritten to match
        (:attr:`options_of`), then the option fields ``scored`` replaced."""
        grid = replace(self, **axes)
        options = grid.options if self.options_of is None else self.options_of(grid)
        if scored:
            options = replace(options, **copy.deepcopy(dict(scored)))
        return replace(grid, options=options)
