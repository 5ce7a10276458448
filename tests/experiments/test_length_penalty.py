"""The length penalty chosen on validation per run (issue 26 item 2): the sweep decodes only the
validation split, the chosen α is the validation argmax, the test BLEU is decoded with it, and a
changed sweep rescores without retraining."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from posenc.config import load_config
from posenc.tasks.translation.cells import run_config
from posenc.tasks.translation.config import ExperimentConfig
from posenc.experiments.runner import verdict
from posenc.pipeline.run import load_run, translate_split
from posenc.tasks.translation.tuning import argmax_first, tune_length_penalty
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.tiny import cli

ALPHAS = [0.0, 0.6, 2.0]


def _experiment(tmp_path: Path, alphas: list[float]) -> Path:
    path = write_experiment(tmp_path, train={"max_steps": 6})
    text = path.read_text(encoding="utf-8")
    path.write_text(text + f"tune_length_penalty: {alphas}\n", encoding="utf-8")
    return path


def test_argmax_first_breaks_ties_by_order() -> None:
    assert argmax_first({"0.6": 10.0, "1": 12.0, "1.4": 12.0}, ["0.6", "1", "1.4"]) == "1"
    assert argmax_first({"0.6": 10.0, "1": 12.0, "1.4": 12.0}, ["1.4", "1", "0.6"]) == "1.4"


def test_sweep_is_the_validation_argmax_and_test_uses_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _experiment(tmp_path, ALPHAS)
    assert cli(capsys, "experiment", path)[0] == 0
    exp = load_config(ExperimentConfig, path)
    cfg = run_config(exp, "vanilla", "ape", 1)
    result = json.loads((Path(cfg.out_dir) / "results.json").read_text(encoding="utf-8"))
    tuning = result["length_penalty"]
    assert tuning["split"] == "valid" and list(tuning["sweep"]) == ["0", "0.6", "2"]
    loaded = load_run(cfg.out_dir)
    again = {f"{a:g}": translate_split(loaded, "valid", replace(cfg.decode, length_penalty=a), stem="check")["bleu"]
             for a in ALPHAS}
    assert again == tuning["sweep"]  # the recorded sweep is validation BLEU per α
    assert tuning["chosen"] == float(argmax_first(again, list(again)))
    test = translate_split(loaded, "test", replace(cfg.decode, length_penalty=tuning["chosen"]), stem="check")
    assert result["scores"]["test"]["bleu"] == test["bleu"]  # test decoded with the chosen α
    report = (exp.root / "report" / "README.md").read_text(encoding="utf-8")
    assert "## Length penalty chosen on validation" in report and "chosen per run on validation BLEU from {0, 0.6, 2}" in report


def test_tuning_never_reads_the_test_split(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_experiment(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    cfg = run_config(load_config(ExperimentConfig, path), "vanilla", "ape", 1)
    assert "length_penalty" not in json.loads((Path(cfg.out_dir) / "results.json").read_text())  # off by default
    loaded = load_run(cfg.out_dir)
    data = Path(cfg.prepared_dir)
    for name in ("test.src", "test.tgt"):  # gone: reading them would stop with "no such file"
        (data / name).rename(tmp_path / name)
    import posenc.pipeline.run as run_module

    read, real = [], run_module.split_files
    monkeypatch.setattr(run_module, "split_files", lambda run, split, data_dir=None: read.append(split) or real(run, split, data_dir))
    tuning = tune_length_penalty(loaded, ALPHAS, cfg.decode)
    assert read == ["valid"] * len(ALPHAS) and set(tuning["sweep"]) == {"0", "0.6", "2"}


def test_changed_sweep_rescores_without_training(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _experiment(tmp_path, ALPHAS)
    assert cli(capsys, "experiment", path)[0] == 0
    exp = load_config(ExperimentConfig, path)
    assert verdict(exp, "vanilla", "ape", 1).kind == "fresh"
    assert verdict(replace(exp, tune_length_penalty=[0.6, 1.0]), "vanilla", "ape", 1).kind == "rescore"
    assert verdict(replace(exp, tune_length_penalty=[]), "vanilla", "ape", 1).kind == "rescore"
