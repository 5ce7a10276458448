#!/usr/bin/env python3
"""Validation BLEU of trained translation runs at GNMT length penalties α beyond an experiment's grid.

Every multi30k_select run chose α = 1.4, the top of its grid {0.6, ..., 1.4} (docs/results.md §0c):
does the grid's edge cost BLEU? This decodes the **validation** split of each run (its averaged
checkpoint, one CPU thread) at ``--alphas`` with posenc's own sweep
(``tasks/translation/tuning.tune_length_penalty``) on a copy of the run directory (the run itself is
not written to), and writes one JSON per run. Usage::

    python -m posenc.bench.alpha_probe --out docs/results/multi30k_select/alpha_probe \\
        docs/results/multi30k_select/vanilla/ape/seed2 docs/results/multi30k_select/vanilla/shape-kstar/seed2

A run without checkpoints (a committed grid keeps none) is refused in one line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from posenc.tasks.translation.load import load_run
from posenc.tasks.translation.tuning import tune_length_penalty


def probe(run_dir: Path, alphas: list[float]) -> dict:
    """The validation sweep of one run at ``alphas``, decoded in a temporary copy of it."""
    if not any((run_dir / "checkpoints").glob("*/model.safetensors")):
        raise SystemExit(f"error: {run_dir}: no checkpoint (committed runs keep none): probe where it was trained")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "run"
        shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("ckpt_*", "tensorboard"))
        run = load_run(str(copy))
        start = time.time()
        out = tune_length_penalty(run, alphas, run.cfg.decode)
    return {**out, "run": str(run_dir), "checkpoint": "checkpoints/average", "wall_s": round(time.time() - start, 1),
            "threads": torch.get_num_threads()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--alphas", type=float, nargs="+", default=[1.4, 1.8, 2.4, 3.0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    for run_dir in args.runs:
        record = probe(run_dir, args.alphas)
        name = "-".join(run_dir.parts[-3:]) + ".json"  # setting-method-seedN
        (args.out / name).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
