"""``posenc average --run DIR --last N``: average the last N checkpoints into checkpoints/average.

``--output`` must be a new (or empty) directory or an earlier average's output: nothing else is
ever replaced. Every averaged checkpoint must belong to the run (its fingerprint.json).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from posenc.data.spm import Tokenizer
from posenc.errors import CheckpointError
from posenc.files import os_errors
from posenc.runs.rundir import check_average_output
from posenc.tasks.translation.load import check_checkpoint_run
from posenc.training.checkpoint import check_vocab, checkpoint_config, checkpoint_state, list_checkpoints, save_average


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="run directory")
    parser.add_argument("--last", type=int, default=10, help="number of checkpoints (SHAPE averages 10)")
    parser.add_argument("--output", help="output checkpoint directory, new or an earlier average "
                                         "(default RUN/checkpoints/average)")


def run(args: argparse.Namespace) -> int:
    ckpt_dir = Path(args.run) / "checkpoints"
    paths = list_checkpoints(ckpt_dir)
    if not paths:
        raise CheckpointError(f"{ckpt_dir}: no checkpoints to average")
    if args.last < 1:
        raise CheckpointError(f"--last must be >= 1, got {args.last}")
    chosen = paths[-args.last :]
    target = Path(args.output) if args.output else ckpt_dir / "average"
    check_average_output(target)
    vocab = Path(args.run) / "spm.model"
    digest = Tokenizer(vocab).sha256 if vocab.is_file() else None
    for path in chosen:
        check_checkpoint_run(Path(args.run), checkpoint_config(path), path)
        if digest is not None:
            check_vocab(checkpoint_state(path), digest, vocab, path)
    with os_errors():
        out = save_average(chosen, target)
    print(f"averaged {len(chosen)} checkpoints ({chosen[0].name} .. {chosen[-1].name}) -> {out}")
    return 0
