"""``posenc prepare``: build the prepared data directory of a run config."""

from __future__ import annotations

import argparse
from pathlib import Path

from posenc.cli.common import add_config_arguments, run_config
from posenc.pipeline.prepare import load_meta, prepare


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--out", help="prepared directory (default: OUT_DIR/data)")


def run(args: argparse.Namespace) -> int:
    cfg = run_config(args)
    out = prepare(cfg.data, args.out or Path(cfg.out_dir) / "data")
    meta = load_meta(out)
    sizes = ", ".join(f"{s} {meta[s]['pairs']}" for s in ("train", "valid", "test"))
    print(f"prepared {out}: {sizes} pairs, vocabulary {meta['vocab_size']}, alpha {meta['alpha']:.3f}")
    return 0
