"""An experiment grid is data (:class:`posenc.experiments.experiment.Experiment`): its cells, run
directories and run configs follow from the base, the named axes and the seeds alone, on hand-made
axes here (the dummy task's run schema); a grid without an outer axis has no group. A selection
stage's sweep, the grid with its chosen value and a grid of fewer methods are derived from the
grid itself, their options rewritten by the task's ``options_of``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from posenc.errors import ConfigError
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.selection import SelectionConfig
from tests.dummy_task.task import DummyConfig

BASE = {"model": {"dim": 3}, "train": {"max_steps": 5}}
METHODS = {"plain": {}, "bias": {"model.bias": True}}


def _grid(root: Path, **changes) -> Experiment:
    return Experiment(**{"name": "grid", "task": "tests.dummy_task", "root": root, "run_schema": DummyConfig,
                         "base": BASE, "methods": METHODS, "seeds": (1, 2), **changes})


def test_a_grid_without_an_outer_axis_has_no_group(tmp_path: Path) -> None:
    grid = _grid(tmp_path)
    assert grid.cells() == [Cell("", "plain", 1), Cell("", "plain", 2), Cell("", "bias", 1), Cell("", "bias", 2)]
    assert [c.name for c in grid.cells()[:2]] == ["plain/1", "plain/2"]
    assert Cell("", "bias", 2).log_name == "bias-seed2"
    cfg = grid.run_config(("", "bias", 2))
    assert Path(cfg.out_dir) == tmp_path / "bias" / "seed2"
    assert Cell("", "bias", 2).label == "bias/seed2" == Path(cfg.out_dir).relative_to(tmp_path).as_posix()
    assert (cfg.model.dim, cfg.model.bias, cfg.train.seed, cfg.train.max_steps) == (3, True, 2, 5)
    with pytest.raises(ConfigError, match="no cell"):
        grid.run_config(("grid", "bias", 2))  # no group to name: none is faked


def test_an_outer_axis_is_a_level_of_the_run_directories(tmp_path: Path) -> None:
    groups = {"small": {"model.dim": 2}, "noisy": {"data.noise": 0.5}}
    grid = _grid(tmp_path, groups=groups, seeds=(7,))
    assert grid.cells() == [Cell("small", "plain", 7), Cell("small", "bias", 7), Cell("noisy", "plain", 7),
                            Cell("noisy", "bias", 7)]
    assert Cell("noisy", "bias", 7).name == "noisy/bias/7" and Cell("noisy", "bias", 7).log_name == "noisy-bias-seed7"
    cfg = grid.run_config(("noisy", "bias", 7))
    assert Path(cfg.out_dir) == tmp_path / "noisy" / "bias" / "seed7"
    assert Cell("noisy", "bias", 7).label == "noisy/bias/seed7" == Path(cfg.out_dir).relative_to(tmp_path).as_posix()
    assert (cfg.model.dim, cfg.model.bias, cfg.data.noise, cfg.train.seed) == (3, True, 0.5, 7)
    assert grid.run_config(("small", "plain", 7)).model.dim == 2
    with pytest.raises(ConfigError, match="no cell"):
        grid.run_config(("", "plain", 7))


@pytest.mark.parametrize("group_last, dim", [(False, 5), (True, 2)])
def test_the_later_overrides_win(tmp_path: Path, group_last: bool, dim: int) -> None:
    """A group and a method that set the same key: the grid's order decides (translation's settings
    apply before the method's overrides, lengthgen's tasks after)."""
    grid = _grid(tmp_path, groups={"g": {"model.dim": 2}}, methods={"wide": {"model.dim": 5}}, group_last=group_last)
    assert grid.run_config(("g", "wide", 1)).model.dim == dim


def test_finish_completes_each_run_config(tmp_path: Path) -> None:
    def finish(exp: Experiment, cell: Cell, cfg: DummyConfig) -> DummyConfig:
        cfg.data.size = 10 * cell.seed
        return cfg

    assert _grid(tmp_path, finish=finish).run_config(("", "plain", 2)).data.size == 20


GROUPS = {"small": {"model.dim": 2}, "noisy": {"data.noise": 0.5}}


def test_a_selection_sweep_is_one_method_per_value_on_its_setting_and_seeds(tmp_path: Path) -> None:
    sel = SelectionConfig(key="model.dim", values=[4, 8], method="bias", setting="noisy", seeds=[2])
    sweep = _grid(tmp_path, groups=GROUPS, selection=sel).sweep(sel)
    assert sweep.cells() == [Cell("noisy", "bias-dim4", 2), Cell("noisy", "bias-dim8", 2)]
    assert sweep.selection is None  # no selection of its own
    cfg = sweep.run_config(("noisy", "bias-dim8", 2))
    assert Path(cfg.out_dir) == tmp_path / "noisy" / "bias-dim8" / "seed2"  # beside the grid's runs
    assert (cfg.model.dim, cfg.model.bias, cfg.data.noise, cfg.train.seed) == (8, True, 0.5, 2)
    flat = _grid(tmp_path).sweep(replace(sel, setting=""))
    assert flat.cells() == [Cell("", "bias-dim4", 2), Cell("", "bias-dim8", 2)]


def test_the_chosen_value_goes_to_the_selected_method_only(tmp_path: Path) -> None:
    sel = SelectionConfig(key="model.dim", values=[4, 8], method="bias")
    grid = _grid(tmp_path, groups=GROUPS, selection=sel)
    chosen = grid.with_value(8)
    assert chosen.cells() == grid.cells() and chosen.selection == sel  # the report names the choice
    assert chosen.run_config(("noisy", "bias", 1)).model.dim == 8
    assert chosen.run_config(("noisy", "plain", 1)).model.dim == 3 == grid.run_config(("noisy", "bias", 1)).model.dim


@dataclass
class _Options:
    """A task's typed experiment config, reduced to the fields a derived grid rewrites or scores on."""

    methods: dict = field(default_factory=dict)
    seeds: list = field(default_factory=list)
    splits: list = field(default_factory=lambda: ["test"])


def _options_of(grid: Experiment) -> _Options:
    return replace(grid.options, methods=dict(grid.methods), seeds=list(grid.seeds))


def test_a_derived_grid_has_the_options_of_its_axes(tmp_path: Path) -> None:
    """The task's ``options_of`` writes the derived grid's axes back into its options (what a worker
    rebuilds the grid from); a sweep's options are also scored as ``sweep_options`` say."""
    sel = SelectionConfig(key="model.dim", values=[4, 8], method="bias", seeds=[1])
    grid = _grid(tmp_path, selection=sel, options=_Options(dict(METHODS), [1, 2]), options_of=_options_of,
                 sweep_options={"splits": ["valid"]})
    sweep = grid.sweep(sel)
    assert sweep.options == _Options({"bias-dim4": {"model.bias": True, "model.dim": 4},
                                      "bias-dim8": {"model.bias": True, "model.dim": 8}}, [1], ["valid"])
    assert grid.with_value(4).options == _Options({"plain": {}, "bias": {"model.bias": True, "model.dim": 4}}, [1, 2])
    assert grid.options == _Options(dict(METHODS), [1, 2])  # the grid itself unchanged
    assert _grid(tmp_path, selection=sel).sweep(sel).options is None  # no options_of: options kept


def test_fewer_methods_keep_the_selection_only_with_its_method(tmp_path: Path) -> None:
    sel = SelectionConfig(key="model.dim", values=[4, 8], method="bias")
    grid = _grid(tmp_path, selection=sel)
    kept, dropped = grid.with_methods(["bias"]), grid.with_methods(["plain"])
    assert list(kept.methods) == ["bias"] and kept.selection == sel
    assert list(dropped.methods) == ["plain"] and dropped.selection is None
    assert [c.method for c in grid.with_methods(["bias", "plain"]).cells()] == ["bias", "bias", "plain", "plain"]
    for labels in ([], ["plain", "plain"], ["wide"]):
        with pytest.raises(ConfigError, match="methods must be distinct labels of experiment grid"):
            grid.with_methods(labels)
