"""Paper-faithful protocol fixes in the experiment report (issue 13)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from posenc.analysis.position_nll import position_nll
from posenc.config import load_config
from posenc.experiments.config import ExperimentConfig
from posenc.experiments.report import SettingView, an_position_nll
from tests.experiments.tiny_grid import write_experiment
from tests.pipeline.tiny import cli


def _rows(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_each_model_is_scored_with_its_own_source_format(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Fix 1: CAPE trained with a source BOS is scored with it; APE (the baseline) without."""
    path = write_experiment(tmp_path, methods=("ape", "cape"))
    assert cli(capsys, "experiment", path)[0] == 0
    exp = load_config(ExperimentConfig, path)
    exp.analysis_options["stack_tokens"] = 10
    view = SettingView(exp, "vanilla")
    bos = view.tok.bos_id
    assert (view.source_bos("ape"), view.source_bos("cape")) == (False, True)
    ape, cape = view.pairs(view.src, view.ref, "ape"), view.pairs(view.src, view.ref, "cape")
    assert cape == [([bos] + a, t) for a, t in ape] and all(a[:1] != [bos] for a, _ in ape)
    with torch.inference_mode():
        an_position_nll(view, tmp_path / "nll")
        src, tgt = _stacked(view)
        position_nll({"cape": view.run("cape").model}, view.pairs(src, tgt, "cape"), tmp_path / "own",
                     bos, view.tok.eos_id, view.tok.pad_id)
        position_nll({"cape": view.run("cape").model}, view.pairs(src, tgt, "ape"), tmp_path / "foreign",
                     bos, view.tok.eos_id, view.tok.pad_id)
    report_rows = [r for r in _rows(tmp_path / "nll" / "position_nll.csv") if r["model"] == "cape"]
    assert report_rows == _rows(tmp_path / "own" / "position_nll.csv")  # scored with its BOS
    assert report_rows != _rows(tmp_path / "foreign" / "position_nll.csv")  # the old, wrong format differs


def _stacked(view: SettingView) -> tuple[list[str], list[str]]:
    from posenc.data import settings as data_settings
    from posenc.data.corpora import Pair

    pairs = [Pair(s, t) for s, t in zip(view.src, view.ref)]
    stacked = data_settings.stack(pairs, 10, length_fn=lambda s: len(view.tok.encode(s)))
    return [p.src for p in stacked], [p.tgt for p in stacked]
