"""``posenc prepare``: build the prepared data directory of a run config."""

from __future__ import annotations

import argparse
from pathlib import Path

from posenc.cli.common import add_config_arguments, run_config
from posenc.errors import ConfigError
from posenc.files import os_errors
from posenc.runs.lock import LOCK_NAME, exclusive
from posenc.runs.ownership import check_free_target
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.prepare import load_meta, prepare


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--out", help="prepared directory (default: OUT_DIR/data)")
    parser.add_argument("--no-resume", action="store_true",
                        help="rebuild the directory if it holds data prepared for another data config "
                             "(only a directory posenc prepared; anything else is refused)")
    parser.add_argument("--tokenizers", metavar="DIR",
                        help="a directory of committed SentencePiece models (a grid's tokenizers/): use its model "
                             "for this data instead of training one, or pin the one trained there")


def run(args: argparse.Namespace) -> int:
    _, cfg = run_config(args)
    if not isinstance(cfg, RunConfig):
        raise ConfigError(f"posenc prepare builds translation data; a {type(cfg).__name__} run prepares its own "
                          "data when it trains (posenc train)")
    out = Path(args.out) if args.out else Path(cfg.out_dir) / "data"
    if not args.out:
        check_free_target(cfg.out_dir, "run")
    lock = (out.parent, f".{out.name}.lock") if args.out else (Path(cfg.out_dir), LOCK_NAME)
    with os_errors(f"a file in {out}"), exclusive(*lock):
        out = prepare(cfg.data, out, replace=args.no_resume, tokenizers=args.tokenizers)
    meta = load_meta(out)
    sizes = ", ".join(f"{s} {meta[s]['pairs']}" for s in ("train", "valid", "test"))
    print(f"prepared {out}: {sizes} pairs, vocabulary {meta['vocab_size']}, alpha {meta['alpha']:.3f}")
    return 0
