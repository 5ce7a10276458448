"""``ExperimentConfig`` → grid cells (``run_config``), ``find_experiment``, task dispatch."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from posenc.config import from_dict, load_config
from posenc.errors import ConfigError
from posenc.experiments.runner import find_experiment, run_experiment
from posenc.tasks.translation.experiment import ExperimentConfig
from tests.helpers.grids import grid_of_config

REPO = Path(__file__).resolve().parents[2]

EXP = {
    "name": "unit",
    "out_dir": "/tmp/unit-exp",
    "base": {"data": {"corpus": "toy", "vocab_size": 40}, "model": {"preset": "transformer-tiny"},
             "train": {"max_steps": 3, "seed": 99}},
    "methods": {"ape": {"model.position.name": "ape"},
                "shape": {"model.position.name": "shape", "model.position.max_shift": 7},
                "short": {"data.max_len": 9}},
    "settings": {"vanilla": {}, "extra": {"data.setting": "extrapolate", "data.max_len": 20}},
    "seeds": [3, 4],
}


def _exp(**changes) -> ExperimentConfig:
    return from_dict(ExperimentConfig, {**EXP, **changes})


def test_grid_order_and_size() -> None:
    exp = _exp()
    cells = grid_of_config(exp).cells()
    assert cells[:3] == [("vanilla", "ape", 3), ("vanilla", "ape", 4), ("vanilla", "shape", 3)]
    assert len(cells) == len(set(cells)) == 2 * 3 * 2


def test_run_config_layers_base_setting_method_seed() -> None:
    grid = grid_of_config(_exp())
    cfg = grid.run_config(("extra", "shape", 4))
    assert cfg.model.position.name == "shape" and cfg.model.position.shape.max_shift == 7  # alias resolved
    assert cfg.data.setting == "extrapolate" and cfg.data.max_len == 20  # from the setting
    assert cfg.train.seed == 4 and cfg.train.max_steps == 3  # the grid's seed wins over base
    assert cfg.model.d_model == 64  # transformer-tiny preset
    assert cfg.out_dir == "/tmp/unit-exp/extra/shape/seed4"
    assert grid.run_config(("extra", "short", 3)).data.max_len == 9  # the method is applied after the setting


def test_prepared_data_is_shared_when_the_data_is_the_same() -> None:
    grid = grid_of_config(_exp())
    dirs = {cell: grid.run_config(cell).prepared_dir for cell in grid.cells()}
    assert dirs[("vanilla", "ape", 3)] == dirs[("vanilla", "shape", 4)]
    assert dirs[("vanilla", "ape", 3)].startswith("/tmp/unit-exp/data/vanilla-")
    assert dirs[("vanilla", "ape", 3)] != dirs[("extra", "ape", 3)]
    assert dirs[("extra", "ape", 3)] != dirs[("extra", "short", 3)]  # different data.max_len


def test_default_root_and_baseline() -> None:
    exp = _exp(out_dir="")
    assert exp.root == Path("runs/unit") and exp.baseline_label == "ape"
    assert _exp(baseline="shape").baseline_label == "shape"


@pytest.mark.parametrize("changes, needle", [
    ({"methods": {}}, "at least one method"),
    ({"seeds": [1, 1]}, "seeds"),
    ({"baseline": "nope"}, "baseline"),
    ({"methods": {"a b": {}}}, "label"),
])
def test_bad_experiment(changes: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        _exp(**changes)


def test_bad_cell_is_an_error() -> None:
    exp = _exp(methods={"bad": {"model.position.name": "gru+shape"}})
    with pytest.raises(ConfigError, match="gru"):
        grid_of_config(exp).run_config(("vanilla", "bad", 3))


def test_find_experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc.experiments.runner import shipped_configs

    assert find_experiment("toy") == shipped_configs() / "experiments" / "toy.yaml"
    assert find_experiment("toy").resolve() == (REPO / "src" / "posenc" / "configs" / "experiments" / "toy.yaml").resolve()
    monkeypatch.chdir(tmp_path)  # README-style configs/ paths work from any directory
    vision = find_experiment("configs/vision/fashion_mnist_small.yaml")
    assert vision == shipped_configs() / "vision" / "fashion_mnist_small.yaml" and vision.is_file()
    own = tmp_path / "mine.yaml"
    assert find_experiment(str(own)) == own
    with pytest.raises(ConfigError, match="unknown experiment 'nope'.*quickstart"):
        find_experiment("nope")


def test_unknown_task(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXP, "task": "chess"}), encoding="utf-8")
    with pytest.raises(ConfigError, match="task must be one of .*chess"):
        run_experiment(str(path))


def test_overrides_on_an_experiment(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(EXP), encoding="utf-8")
    exp = load_config(ExperimentConfig, path, ["seeds=[5]", "settings={v: {}}"])
    assert grid_of_config(exp).cells() == [("v", "ape", 5), ("v", "shape", 5), ("v", "short", 5)]


def test_unknown_analysis_is_rejected_up_front() -> None:
    with pytest.raises(ConfigError, match="lenght_bleu"):
        _exp(analyses=["lenght_bleu"])


@pytest.mark.parametrize("task", ["vision", "speech"])
def test_task_key_dispatches_to_the_task_schema(tmp_path: Path, task: str) -> None:
    """A `task: vision|speech` YAML is validated by that task's own config class."""
    from posenc.experiments.runner import run_experiment

    path = tmp_path / "exp.yaml"
    path.write_text(f"task: {task}\nno_such_option: 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="no_such_option"):
        run_experiment(str(path))


def test_unknown_task_is_rejected(tmp_path: Path) -> None:
    from posenc.experiments.runner import run_experiment

    path = tmp_path / "exp.yaml"
    path.write_text("task: astronomy\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="astronomy"):
        run_experiment(str(path))


def test_an_experiment_never_swaps_itself_for_its_gpu_variant(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """`posenc experiment quickstart` runs quickstart on every machine, a CUDA GPU visible or not;
    the GPU variant runs when asked for by its name, and a YAML that asks for a swap is refused."""
    import torch

    from posenc.experiments import runner

    calls: list[tuple[str, dict]] = []
    monkeypatch.setattr(runner, "run_grid_experiment", lambda task, data, overrides, **opts: calls.append((data["name"], opts)) or Path("."))
    for cuda in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda cuda=cuda: cuda)
        runner.run_experiment("quickstart", jobs=1)
    runner.run_experiment("quickstart_gpu", jobs=4)
    assert calls == [("quickstart", {"jobs": 1}), ("quickstart", {"jobs": 1}), ("quickstart_gpu", {"jobs": 4})]
    gpu = load_config(ExperimentConfig, find_experiment("quickstart_gpu"))
    assert gpu.base["data"]["corpus"] == "bible" and gpu.base["train"]["precision"] == "bf16"
    path = tmp_path / "swap.yaml"
    path.write_text("name: swap\non_gpu: quickstart_gpu\nmethods: {ape: {}}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="on_gpu: unknown option"):
        load_config(ExperimentConfig, path)


def test_tasks_are_found_by_package_and_unknown_ones_are_one_line_errors() -> None:
    from posenc.experiments import runner

    assert runner.known_tasks() == ["translation", "lengthgen", "speech", "vision"]
    for bad in ("poetry", "../x", "translation2"):
        with pytest.raises(ConfigError, match="task must be one of translation, lengthgen, speech, vision"):
            runner.task_runner(bad)
    import posenc.tasks.lengthgen
    import posenc.tasks.speech
    import posenc.tasks.vision

    for name, module in (("vision", posenc.tasks.vision), ("speech", posenc.tasks.speech),
                         ("lengthgen", posenc.tasks.lengthgen)):
        entry = runner.task_runner(name)  # the shared grid runner (--jobs, freshness, --rerun-stale)
        assert entry.func is runner.run_grid_experiment and entry.args == (module.TASK,)
