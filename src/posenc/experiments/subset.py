"""Part of a grid: the cells whose setting, method and seed are among the ones named (an empty
list names every one). ``posenc experiment --settings/--methods/--seeds`` trains such a part and
a GPU queue entry (:mod:`posenc.window.queue`) asks for one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from posenc.config import require
from posenc.experiments.experiment import Cell, Experiment


@dataclass(frozen=True)
class CellSubset:
    """The cells wanted: each filter empty (every value) or the values it keeps."""

    settings: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()

    @classmethod
    def of(cls, settings: Sequence[str] = (), methods: Sequence[str] = (), seeds: Sequence[int] = ()) -> CellSubset:
        return cls(tuple(settings), tuple(methods), tuple(seeds))

    @property
    def everything(self) -> bool:
        return not (self.settings or self.methods or self.seeds)

    def wants(self, cell: Cell) -> bool:
        """Whether ``cell`` (setting, method, seed) is one of the subset's."""
        group, method, seed = cell
        return ((not self.settings or group in self.settings) and (not self.methods or method in self.methods)
                and (not self.seeds or seed in self.seeds))

    def check(self, grid: Experiment, sweep: Experiment | None, where: str) -> None:
        """A value that names nothing in ``grid`` (or its selection ``sweep``, for methods) is a
        one-line ConfigError starting with ``where``: a typo would otherwise select nothing."""
        cells = grid.cells()
        require(not self.settings or any(c[0] for c in cells),
                f"{where}: {grid.name} has no settings (its grid has no outer axis): drop --settings")
        methods = {c[1] for c in cells} | ({c[1] for c in sweep.cells()} if sweep is not None else set())
        filters = (("settings", self.settings, {c[0] for c in cells if c[0]}), ("methods", self.methods, methods),
                   ("seeds", self.seeds, {c[2] for c in cells}))
        for what, wanted, have in filters:
            unknown = [w for w in wanted if w not in have]
            require(not unknown, f"{where}: {what} {unknown} not in the grid ({sorted(have)})")
