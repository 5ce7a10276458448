"""``posenc translate --run DIR (--input FILE --output FILE | --split test)``.

The model is rebuilt from the config saved with the checkpoint; the run directory is treated as
untrusted: ``--split`` reads only the run's own data (inside the run directory, or ``--data``)
and writes only into its ``translations/``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import torch

from posenc.cli.common import check_device
from posenc.decoding.translate import read_lines_lazily, translate_file, translate_lines
from posenc.errors import ConfigError
from posenc.pipeline.run import SPLITS, decode_options, load_run, translate_split


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="run directory (with config.yaml and checkpoints/)")
    parser.add_argument("--checkpoint", default="auto", help="auto | average | latest | PATH")
    parser.add_argument("--input", "-i", help="source file (plain or .gz); '-' for stdin")
    parser.add_argument("--output", "-o", help="output file (written atomically); default stdout")
    parser.add_argument("--split", help=f"translate and score a split of the run's data ({', '.join(SPLITS)})")
    parser.add_argument("--data", help="prepared data directory for --split (default: the run's own)")
    parser.add_argument("--beam", type=int, help="beam width (1 = greedy)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")


def _check_args(args: argparse.Namespace) -> None:
    check_device(args.device)
    if args.split and args.split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {args.split!r}")
    if args.split and (args.input or args.output):
        raise ConfigError("give either --split NAME or --input FILE [--output FILE], not both")
    if not args.split and not args.input:
        raise ConfigError("give --input FILE or --split NAME")
    if args.data and not args.split:
        raise ConfigError("--data is only used with --split")
    if args.beam is not None and args.beam < 1:
        raise ConfigError(f"decode.beam (--beam) must be >= 1, got {args.beam}")


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    loaded = load_run(args.run, args.checkpoint, args.device, confine=True)
    dc = loaded.cfg.decode if args.beam is None else replace(loaded.cfg.decode, beam=args.beam)
    if args.split:
        scores = translate_split(loaded, args.split, dc, data_dir=args.data)
        print(json.dumps(scores, indent=2))
        print(f"{args.split}: {scores['bleu_text']} (signature {scores['bleu_signature']})", file=sys.stderr)
        return 0
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
