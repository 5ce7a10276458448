"""The cells of an experiment grid and each cell's run config (no dependency on the runner or
the report, so both import it without a circle)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from posenc.config import apply_mapping, from_dict, to_dict
from posenc.experiments.tasks import Cell
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.experiment import ExperimentConfig


def run_config(exp: ExperimentConfig, setting: str, method: str, seed: int) -> RunConfig:
    """Base config + setting overrides + method overrides + seed, with its directories."""
    data = apply_mapping(exp.base, exp.settings[setting], RunConfig)
    data = apply_mapping(data, exp.methods[method], RunConfig)
    data = apply_mapping(data, {"train.seed": seed}, RunConfig)
    cfg = from_dict(RunConfig, data)
    key = hashlib.sha256(json.dumps(to_dict(cfg.data), sort_keys=True).encode()).hexdigest()[:8]
    return replace(cfg, out_dir=str(exp.root / setting / method / f"seed{seed}"),
                   data_dir=str(data_root(exp) / f"{setting}-{key}"))


def data_root(exp: ExperimentConfig) -> Path:
    """Where the experiment keeps the prepared data of its settings (and their SentencePiece cache)."""
    return exp.root / "data"


def grid(exp: ExperimentConfig) -> list[Cell]:
    """Every cell, setting-major: ``Cell(group=setting, method, seed)``."""
    return [Cell(s, m, seed) for s in exp.settings for m in exp.methods for seed in exp.seeds]
