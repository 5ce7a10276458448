"""A one-setting experiment YAML on the toy corpus (a few seconds per run on a CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_experiment(root: Path, methods: tuple[str, ...] = ("ape",), seeds: tuple[int, ...] = (1,),
                     train: dict[str, Any] | None = None, model: dict[str, Any] | None = None,
                     decode: dict[str, Any] | None = None) -> Path:
    """``root/tiny.yaml``: toy data, a d_model=32 transformer, 3 steps, no analyses."""
    all_methods = {"ape": {"model.position.name": "ape"},
                   "shape": {"model.position.name": "shape", "model.position.max_shift": 20},
                   "cape": {"model.position.name": "cape", "model.position.mean_normalize": False}}
    exp = {
        "name": "tiny", "out_dir": str(root / "exp"),
        "base": {
            "data": {"corpus": "toy", "vocab_size": 40, "options": {"n_train": 60, "n_valid": 8, "n_test": 12}},
            "model": {"preset": "transformer-tiny", "d_model": 32, "d_ff": 64, **(model or {})},
            "train": {"max_steps": 3, "max_tokens": 400, "warmup": 2, "lr": 0.001, "validate_every": 1,
                      "save_every": 0, "keep_last": 2, "average_last": 0, "log_every": 1, "device": "cpu", "num_threads": 1,
                      **(train or {})},
            "decode": {"beam": 2, **(decode or {})},
        },
        "methods": {m: all_methods[m] for m in methods},
        "seeds": list(seeds),
        "analyses": [],
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "tiny.yaml"
    path.write_text(yaml.safe_dump(exp, sort_keys=False), encoding="utf-8")
    return path
