"""Run an experiment grid run by run (resumable), then write its report.

Layout under ``root``: ``data/<setting>-<hash>/`` (prepared once, shared by methods and
seeds), ``<setting>/<method>/seed<N>/`` (a run directory with ``results.json`` once done),
``report/`` (Markdown tables and every PNG).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posenc.config import apply_mapping, from_dict, load_yaml, merge_overrides, to_dict
from posenc.experiments.config import ExperimentConfig
from posenc.pipeline.config import RunConfig

log = logging.getLogger("posenc")


def run_config(exp: ExperimentConfig, setting: str, method: str, seed: int) -> RunConfig:
    """Base config + setting overrides + method overrides + seed, with its directories."""
    data = apply_mapping(exp.base, exp.settings[setting], RunConfig)
    data = apply_mapping(data, exp.methods[method], RunConfig)
    data = apply_mapping(data, {"train.seed": seed}, RunConfig)
    cfg = from_dict(RunConfig, data)
    key = hashlib.sha256(json.dumps(to_dict(cfg.data), sort_keys=True).encode()).hexdigest()[:8]
    data["out_dir"] = str(exp.root / setting / method / f"seed{seed}")
    data["data_dir"] = str(exp.root / "data" / f"{setting}-{key}")
    return from_dict(RunConfig, data)


def grid(exp: ExperimentConfig) -> list[tuple[str, str, int]]:
    return [(s, m, seed) for s in exp.settings for m in exp.methods for seed in exp.seeds]


def run_translation(exp: ExperimentConfig, setting: str, method: str, seed: int) -> dict[str, Any]:
    """Train and score one grid cell unless its results.json exists."""
    from posenc.pipeline.run import load_run, translate_split
    from posenc.pipeline.train import train_run

    cfg = run_config(exp, setting, method, seed)
    done = Path(cfg.out_dir) / "results.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    log.info("== %s / %s / seed %d -> %s", setting, method, seed, cfg.out_dir)
    summary = train_run(cfg)
    loaded = load_run(cfg.out_dir)
    scores = {split: translate_split(loaded, split) for split in exp.splits}
    result = {"setting": setting, "method": method, "seed": seed, "summary": summary, "scores": scores}
    done.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def run_translation_grid(exp: ExperimentConfig) -> Path:
    from posenc.experiments.report import write_translation_report

    results = [run_translation(exp, s, m, seed) for s, m, seed in grid(exp)]
    return write_translation_report(exp, results)


def _translation(data: dict[str, Any], overrides: list[str]) -> Path:
    exp = from_dict(ExperimentConfig, merge_overrides(data, overrides, ExperimentConfig))
    return run_translation_grid(exp)


def _vision(data: dict[str, Any], overrides: list[str]) -> Path:
    """ViT on Fashion-MNIST by resolution (CAPE §5.1): ``posenc.vision``'s own config schema."""
    from posenc import vision

    cfg = from_dict(vision.VisionConfig, merge_overrides(data, overrides, vision.VisionConfig))
    vision.run_experiment(cfg, cfg.out_dir)
    return Path(cfg.out_dir)


def _speech(data: dict[str, Any], overrides: list[str]) -> Path:
    """CTC on FSDD by duration (CAPE §5.2): ``posenc.speech``'s own config schema."""
    from posenc import speech

    cfg = from_dict(speech.SpeechConfig, merge_overrides(data, overrides, speech.SpeechConfig))
    speech.run_experiment(cfg)
    return Path(cfg.out_dir)


def _lengthgen(data: dict[str, Any], overrides: list[str]) -> Path:
    """Decoder-only LM on algorithmic tasks, trained short, tested long (Ruoss et al. 2023)."""
    from posenc.tasks.lengthgen.driver import run_experiment as run_lengthgen

    return run_lengthgen(data, overrides)


#: ``task:`` key of an experiment YAML → runner(raw mapping without ``task``, overrides) → report dir.
TASKS: dict[str, Callable[[dict[str, Any], list[str]], Path]] = {
    "translation": _translation,
    "vision": _vision,
    "speech": _speech,
    "lengthgen": _lengthgen,
}


def find_experiment(name_or_path: str) -> Path:
    """A YAML path, or the name of a shipped config under ``configs/experiments``."""
    from posenc.errors import ConfigError

    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return path
    repo_configs = Path(__file__).resolve().parents[3] / "configs"
    for candidate in (repo_configs / "experiments" / f"{name_or_path}.yaml", repo_configs / f"{name_or_path}.yaml"):
        if candidate.is_file():
            return candidate
    known = sorted(p.stem for p in (repo_configs / "experiments").glob("*.yaml"))
    raise ConfigError(f"unknown experiment {name_or_path!r} (shipped: {', '.join(known)}; or give a YAML path)")


def run_experiment(name_or_path: str, overrides: list[str] | None = None) -> Path:
    """Run a shipped or user experiment; its top-level ``task`` picks the runner."""
    from posenc.errors import ConfigError

    data = load_yaml(find_experiment(name_or_path))
    task = data.get("task", "translation")
    if task not in TASKS:
        raise ConfigError(f"experiment task must be one of {', '.join(TASKS)}, got {task!r}")
    return TASKS[task](data, list(overrides or []))
