"""``posenc average --run DIR --last N``: average the last N checkpoints into checkpoints/average."""

from __future__ import annotations

import argparse
from pathlib import Path

from posenc.errors import CheckpointError
from posenc.training.checkpoint import list_checkpoints, save_average


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="run directory")
    parser.add_argument("--last", type=int, default=10, help="number of checkpoints (SHAPE averages 10)")
    parser.add_argument("--output", help="output checkpoint directory (default RUN/checkpoints/average)")


def run(args: argparse.Namespace) -> int:
    ckpt_dir = Path(args.run) / "checkpoints"
    paths = list_checkpoints(ckpt_dir)
    if not paths:
        raise CheckpointError(f"{ckpt_dir}: no checkpoints to average")
    if args.last < 1:
        raise CheckpointError(f"--last must be >= 1, got {args.last}")
    chosen = paths[-args.last :]
    out = save_average(chosen, args.output or ckpt_dir / "average")
    print(f"averaged {len(chosen)} checkpoints ({chosen[0].name} .. {chosen[-1].name}) -> {out}")
    return 0
