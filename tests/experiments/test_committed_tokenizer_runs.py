"""The committed Multi30k runs that record the grid's tokenizer were trained with it: the target
tokens of each run's first logged updates (train.csv) are exactly what the committed SentencePiece
model gives for that run's config and seed (the same batches, rebuilt here), which a model with
other pieces does not reproduce. This is what the tokenizer identity recorded in their summaries
rests on (issue 56); it needs the Multi30k data in ../shared/data."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from posenc.config import load_config
from posenc.decoding.loaded import source_bos
from posenc.experiments.runner import find_experiment
from posenc.tasks.translation.experiment import ExperimentConfig, run_config
from posenc.tasks.translation.prepare import TOKENIZERS_DIR, prepare
from posenc.tasks.translation.task import TranslationTask

ROOT = Path(__file__).resolve().parents[2]
GRIDS = ("multi30k_select", "multi30k_position_nll")

pytestmark = pytest.mark.skipif(not (ROOT.parent / "shared" / "data" / "multi30k").is_dir(),
                                reason="needs the Multi30k data in ../shared/data/multi30k")


def _runs() -> list[tuple[ExperimentConfig, str, str, int, Path]]:
    """(grid, setting, method, seed, run directory) of every committed run of ``GRIDS``."""
    out = []
    for name in GRIDS:
        exp = replace(load_config(ExperimentConfig, find_experiment(name)), out_dir=str(ROOT / "docs" / "results" / name))
        labels = set(exp.methods) | set(_sweep_labels(exp))
        for run in sorted(Path(exp.out_dir).glob("*/*/seed*/results.json")):
            setting, method, seed = run.parts[-4], run.parts[-3], int(run.parent.name[4:])
            assert method in labels, run
            out.append((exp, setting, method, seed, run.parent))
    return out


def _sweep_labels(exp: ExperimentConfig) -> dict[str, object]:
    """The selection sweep's method labels (``SelectionConfig.label``) and their swept values."""
    sel = exp.selection
    return {sel.label(v): v for v in sel.values} if sel.enabled else {}


def _method_overrides(exp: ExperimentConfig, method: str) -> ExperimentConfig:
    """``exp`` with a sweep cell's label as a method (the selected method with its swept value)."""
    if method in exp.methods:
        return exp
    sel = exp.selection
    return replace(exp, methods={**exp.methods, method: {**exp.methods[sel.method], sel.key: _sweep_labels(exp)[method]}})


def test_every_recorded_tokenizer_reproduces_the_first_logged_tokens(tmp_path: Path) -> None:
    tasks: dict[tuple[str, str, bool], TranslationTask] = {}
    checked = 0
    for exp, setting, method, seed, run in _runs():
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        assert summary.get("tokenizer"), f"{run}: no tokenizer recorded"
        exp = _method_overrides(exp, method)
        cfg = run_config(exp, setting, method, seed)
        cfg = replace(cfg, data_dir=str(tmp_path / exp.name / Path(cfg.data_dir).name))
        prepare(cfg.data, cfg.prepared_dir, tokenizers=exp.root / TOKENIZERS_DIR, pin=False)
        task = TranslationTask(splits=())
        task = tasks.setdefault((exp.name, setting, source_bos(task.resolved(cfg))), task)
        task.build_model(cfg)  # the batches depend on the model's source BOS (CAPE prepends one)
        assert task.prepared(cfg).tokenizer.identity == summary["tokenizer"], run
        with open(run / "train.csv", newline="", encoding="utf-8") as fh:
            first = next(csv.DictReader(fh))
        batches = task.train_batches(cfg, 0, 0, 1)[: int(first["step"]) * cfg.train.update_freq]
        assert sum(b.ntokens for b in batches) == int(first["tokens"]), run
        checked += 1
    assert checked >= 48  # every run of both grids
