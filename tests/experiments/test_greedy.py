"""``experiment.greedy_splits``: splits also decoded greedily beside the tuned beam (Neishi &
Yoshinaga's decoding), recorded in results.json and the run's record; a grid that adds it rescores
(decoding only), a grid without it keeps every older record fresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from posenc.config import load_config
from posenc.data.text import read_lines
from posenc.errors import ConfigError
from posenc.evaluation.metrics import corpus_scores
from posenc.tasks.translation.experiment import ExperimentConfig
from posenc.tasks.translation.report import SettingView
from posenc.tasks.translation.task import TASK
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.grids import grid_of_config, verdict_now
from tests.helpers.tiny import cli


def _with(path: Path, **keys) -> Path:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data.update(keys)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_greedy_translations_are_recorded_beside_the_beam(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_experiment(tmp_path, decode={"beam": 3})
    assert cli(capsys, "experiment", str(path))[0] == 0
    exp = load_config(ExperimentConfig, path)
    (cell,) = TASK.experiment(exp).cells()
    assert verdict_now(grid_of_config(exp, TASK), cell).kind == "fresh"
    _with(path, greedy_splits=["test"])
    exp = load_config(ExperimentConfig, path)
    verdict = verdict_now(grid_of_config(exp, TASK), cell)
    assert verdict.kind == "rescore"  # decoding only: the trained model is reused
    assert cli(capsys, "experiment", str(path))[0] == 0
    run = Path(TASK.experiment(exp).run_config(cell).out_dir)
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    greedy = results["greedy"]["test"]
    assert (greedy["beam"], greedy["length_penalty"], greedy["hyp"]) == (1, 0.0, "translations/test.beam1.hyp")
    assert results["scores"]["test"]["hyp"] == "translations/test.beam3.hyp"
    assert results["record"]["evaluation"]["greedy_splits"] == ["test"]
    data = Path(TASK.experiment(exp).run_config(cell).prepared_dir)
    again = corpus_scores(read_lines(run / greedy["hyp"]), read_lines(data / "test.tgt"))
    assert again["bleu"] == pytest.approx(greedy["bleu"])
    assert verdict_now(grid_of_config(exp, TASK), cell).kind == "fresh"
    view = SettingView(exp, "vanilla")  # what long_sources reads with analysis_options.outputs: greedy
    assert view.hyps_by_seed("ape", greedy=True) == [read_lines(run / "translations" / "test.beam1.hyp")]
    assert view.hyps_by_seed("ape") == [read_lines(run / "translations" / "test.beam3.hyp")]
    without = SettingView(load_config(ExperimentConfig, _with(path, greedy_splits=[])), "vanilla")
    with pytest.raises(ConfigError, match="no greedy test translations; add test to experiment.greedy_splits"):
        without.hyps_by_seed("ape", greedy=True)


def test_long_sources_reads_beam_or_greedy_outputs() -> None:
    from posenc.analysis.registry import REGISTRY

    assert REGISTRY["long_sources"].parse_options({}).outputs == "beam"
    assert REGISTRY["long_sources"].parse_options({"outputs": "greedy"}).outputs == "greedy"
    with pytest.raises(ConfigError, match="experiment.analysis_options.outputs must be beam or greedy, got 'sampled'"):
        REGISTRY["long_sources"].parse_options({"outputs": "sampled"})


def test_greedy_splits_must_be_scored_splits(tmp_path: Path) -> None:
    path = _with(write_experiment(tmp_path), greedy_splits=["valid"])
    with pytest.raises(ConfigError, match=r"experiment.greedy_splits must be distinct splits of experiment.splits"):
        load_config(ExperimentConfig, path)
