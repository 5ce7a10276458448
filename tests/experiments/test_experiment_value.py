"""An experiment grid is data (:class:`posenc.experiments.experiment.Experiment`): its cells, run
directories and run configs follow from the base, the named axes and the seeds alone, on hand-made
axes here (the dummy task's run schema); a grid without an outer axis has no group."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.errors import ConfigError
from posenc.experiments.experiment import Cell, Experiment
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
