"""``posenc translate --run DIR (--input FILE --output FILE | --split test)``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import torch

from posenc.decoding.translate import read_lines_lazily, translate_file, translate_lines
from posenc.errors import ConfigError
from posenc.pipeline.run import decode_options, load_run, translate_split


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="run directory (with config.yaml and checkpoints/)")
    parser.add_argument("--checkpoint", default="auto", help="auto | average | latest | PATH")
    parser.add_argument("--input", "-i", help="source file (plain or .gz); '-' for stdin")
    parser.add_argument("--output", "-o", help="output file (written atomically); default stdout")
    parser.add_argument("--split", help="translate and score a split of the run's data (valid/test)")
    parser.add_argument("--beam", type=int, help="beam width (1 = greedy)")
    parser.add_argument("--device", default="cpu")


def run(args: argparse.Namespace) -> int:
    loaded = load_run(args.run, args.checkpoint, args.device)
    dc = loaded.cfg.decode if args.beam is None else replace(loaded.cfg.decode, beam=args.beam)
    if args.split:
        print(json.dumps(translate_split(loaded, args.split, dc), indent=2))
        return 0
    if not args.input:
        raise ConfigError("give --input FILE or --split NAME")
    opts = decode_options(dc, loaded)
    with torch.inference_mode():
        if args.input != "-" and args.output:
            n = translate_file(loaded.model, loaded.tokenizer, args.input, args.output, **opts)
            print(f"translated {n} lines -> {args.output}", file=sys.stderr)
            return 0
        lines = (line.rstrip("\n") for line in sys.stdin) if args.input == "-" else read_lines_lazily(args.input)
        for out in translate_lines(loaded.model, loaded.tokenizer, lines, **opts):
            print(out)
    return 0
