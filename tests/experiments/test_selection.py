"""The selection stage of `posenc experiment`: a hyperparameter swept on the
validation split, the validation argmax chosen, the test grid run with it; the sweep never decodes
or scores test data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from posenc.config import from_dict, load_config
from posenc.errors import ConfigError
from posenc.experiments.selection import SelectionConfig, best_value
from posenc.tasks.translation.experiment import ExperimentConfig
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.tiny import cli

VALUES = [1, 8, 30]


def _experiment(tmp_path: Path) -> Path:
    path = write_experiment(tmp_path, methods=("ape", "shape"), train={"max_steps": 6})
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["selection"] = {"key": "model.position.max_shift", "values": VALUES, "method": "shape", "seeds": [1]}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_best_value_is_the_argmax_first_listed_on_ties() -> None:
    sel = SelectionConfig(key="model.position.max_shift", values=[10, 20, 40], method="shape")
    means = {"shape-max_shift10": 30.0, "shape-max_shift20": 31.5, "shape-max_shift40": 31.5}
    assert best_value(sel, means) == 20
    lower = SelectionConfig(key="train.lr", values=[1, 2, 3], method="ape", higher_is_better=False)
    assert best_value(lower, {"ape-lr1": 2.0, "ape-lr2": 1.0, "ape-lr3": 1.5}) == 2


def test_selection_block_is_checked() -> None:
    base = {"methods": {"ape": {}}, "selection": {"key": "model.position.max_shift", "values": [1, 2], "method": "shape"}}
    with pytest.raises(ConfigError, match="selection.method 'shape' is not a method label"):
        from_dict(ExperimentConfig, base)
    with pytest.raises(ConfigError, match="at least two distinct values"):
        from_dict(ExperimentConfig, {**base, "selection": {**base["selection"], "values": [1, 1], "method": "ape"}})


def test_selection_picks_the_validation_argmax_and_never_reads_test(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import posenc.tasks.translation.load as run_module

    read, real = [], run_module.split_files
    monkeypatch.setattr(run_module, "split_files",
                        lambda run, split, data_dir=None: read.append((run.root.parent.name, split)) or real(run, split, data_dir))
    path = _experiment(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    exp = load_config(ExperimentConfig, path)
    labels = [f"shape-max_shift{v}" for v in VALUES]
    assert sorted(split for method, split in read if method in labels) == ["valid"] * len(VALUES)  # never test
    assert sorted(split for method, split in read if method not in labels) == ["test", "test"]  # the grid: ape, shape
    record = json.loads((exp.root / "selection" / "selection.json").read_text(encoding="utf-8"))
    valid = {}
    for label in labels:
        result = json.loads((exp.root / "vanilla" / label / "seed1" / "results.json").read_text(encoding="utf-8"))
        assert set(result["scores"]) == {"valid"}
        assert not list((exp.root / "vanilla" / label / "seed1" / "translations").glob("test*"))
        valid[label] = result["scores"]["valid"]["bleu"]
    assert [row["mean"] for row in record["rows"]] == [valid[label] for label in labels]
    best = max(range(len(VALUES)), key=lambda i: (valid[labels[i]], -i))
    assert record["chosen"] == VALUES[best]
    trained = yaml.safe_load((exp.root / "vanilla" / "shape" / "seed1" / "config.yaml").read_text(encoding="utf-8"))
    assert trained["model"]["position"]["shape"]["max_shift"] == VALUES[best]  # the grid used the chosen value
    report = (exp.root / "report" / "README.md").read_text(encoding="utf-8")
    assert "## Selection of `model.position.max_shift` on validation" in report and f"**Chosen: {VALUES[best]}**" in report
    _listing_the_cells_writes_nothing(path, exp, record["chosen"])


def _listing_the_cells_writes_nothing(path: Path, exp: ExperimentConfig, chosen: int) -> None:
    """A queue's validation and its list of cells (``posenc queue pack``) read the complete sweep's
    choice without writing ``selection.json`` (or anything) into the grid's out_dir."""
    from posenc.experiments.runner import grid_stages
    from posenc.experiments.tasks import task_of
    from posenc.window.queue import Queue, QueueEntry, check_entries, entry_cells
    from tests.helpers.files import md5s

    (exp.root / "selection" / "selection.json").unlink()
    before = md5s(exp.root)
    (entry, grid), = check_entries(Queue([QueueEntry(str(path), cell_minutes=1, methods=["shape"])]))
    cells = entry_cells(entry, grid)
    _, main, waits = grid_stages(grid, task_of(grid))
    assert not waits and main.run_config(("vanilla", "shape", 1)).model.position.shape.max_shift == chosen
    assert [c for _, c in cells] == [("vanilla", "shape", 1)]
    assert md5s(exp.root) == before and not (exp.root / "selection" / "selection.json").exists()


def test_a_subset_of_sweep_cells_counts_the_runs_it_brought_up_to_date(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    """``--methods`` naming sweep cells only: the line after the runs counts them (the sweep's runs
    are runs of the grid too), and nothing of the test grid trains."""
    path = _experiment(tmp_path)
    code, out, _ = cli(capsys, "experiment", path, "--methods", "shape-max_shift1,shape-max_shift8")
    assert code == 0 and "2 runs of" in out and "2 of them of the selection sweep" in out
    exp = load_config(ExperimentConfig, path)
    assert not (exp.root / "vanilla" / "shape" / "seed1" / "results.json").exists()
