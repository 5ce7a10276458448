"""The cells of an experiment grid and each cell's run config (no dependency on the runner or
the report, so both import it without a circle)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from posenc.config import to_dict
from posenc.experiments.cell import cell_run_config
from posenc.experiments.tasks import Cell
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.experiment import ExperimentConfig


def run_config(exp: ExperimentConfig, setting: str, method: str, seed: int) -> RunConfig:
    """Base config + setting overrides + method overrides + seed (:func:`~posenc.experiments.cell.cell_run_config`),
    with its directories: the run's, and its setting's prepared data (one per data config)."""
    cfg = cell_run_config(RunConfig, exp.base, [exp.settings[setting], exp.methods[method]], seed,
                          exp.root / setting / method / f"seed{seed}")
    key = hashlib.sha256(json.dumps(to_dict(cfg.data), sort_keys=True).encode()).hexdigest()[:8]
    return replace(cfg, data_dir=str(data_root(exp) / f"{setting}-{key}"))


def data_root(exp: ExperimentConfig) -> Path:
    """Where the experiment keeps the prepared data of its settings (and their SentencePiece cache)."""
    return exp.root / "data"


def grid(exp: ExperimentConfig) -> list[Cell]:
    """Every cell, setting-major: ``Cell(group=setting, method, seed)``."""
    return [Cell(s, m, seed) for s in exp.settings for m in exp.methods for seed in exp.seeds]
