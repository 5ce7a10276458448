"""``posenc export --run DIR --format ctranslate2 --out DIR [--quantization int8|bfloat16|float32]``.

Writes the run's model for another inference engine (serving/ctranslate2.py): into a new or
empty directory or an earlier export, with the run's SentencePiece model and decoding options (the
length penalty its experiment tuned on validation, where it tuned one), so
``posenc translate --engine ctranslate2 --run OUT`` translates with it.
"""

from __future__ import annotations

import argparse
import json
import sys

from posenc.files import os_errors
from posenc.serving.ctranslate2 import QUANTIZATIONS, export_run
from posenc.tasks.translation.load import load_run

#: ``--format`` → the exporter (one so far).
FORMATS = {"ctranslate2": export_run}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="trained run directory (with config.yaml and checkpoints/)")
    parser.add_argument("--checkpoint", default="auto", help="auto | average | latest | PATH")
    parser.add_argument("--format", required=True, choices=sorted(FORMATS), help="target engine")
    parser.add_argument("--out", required=True, help="output directory (new, empty, or an earlier posenc export)")
    parser.add_argument("--quantization", default="float32", choices=sorted(QUANTIZATIONS),
                        help="weight type of the exported model (default float32)")


def run(args: argparse.Namespace) -> int:
    with os_errors(f"a file in {args.out}"):
        loaded = load_run(args.run, args.checkpoint, "cpu", confine=True)
        info = FORMATS[args.format](loaded, args.out, args.quantization)
    print(json.dumps(info, indent=1))
    print(f"exported {args.run} ({info['position']}, {info['quantization']}) -> {args.out}", file=sys.stderr)
    return 0
