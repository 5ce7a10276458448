"""``posenc translate --run DIR (--input FILE --output FILE | --split test) [--length-penalty A]``.

A run whose experiment tuned the length penalty on validation decodes with that α (its
results.json's ``length_penalty.chosen``, the α behind its reported BLEU); ``--length-penalty``
overrides it.

The model is rebuilt from the config saved with the checkpoint; the run directory is treated as
untrusted: ``--split`` reads only the run's own data (inside the run directory, or ``--data``)
and writes only into its ``translations/``, as ``<split>.beam<K>.lp<α>.hyp``/``.json``: beside,
never over, the translations an experiment's results.json scored, and under the run's lock (never
while ``posenc train`` or another command writes the run). ``--output FILE`` (also with ``--input -``) is
written atomically and shows progress: a bar on a terminal, else a log line every 5 seconds;
it must not be the input file, lie inside any posenc directory (a run, prepared data, a report,
logs, a CTranslate2 export, a checkpoint), or need a directory created (all refused in one line
before the model loads).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from posenc.cli.common import check_device
from posenc.decoding.config import DecodeConfig
from posenc.decoding.loaded import LoadedRun, tuned_alpha
from posenc.decoding.translate import MAX_BEAM, read_lines_lazily, read_stdin_lines, translate_lines, write_translations
from posenc.errors import ConfigError
from posenc.files import os_errors
from posenc.runs.lock import exclusive
from posenc.runs.ownership import check_user_output
from posenc.tasks.translation.load import SPLITS, decode_options, load_run, translate_split

log = logging.getLogger("posenc")
#: Seconds between progress lines when stderr is not a terminal.
PROGRESS_EVERY_S = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="run directory (with config.yaml and checkpoints/)")
    parser.add_argument("--checkpoint", default="auto", help="auto | average | latest | PATH")
    parser.add_argument("--input", "-i", help="source file (plain or .gz); '-' for stdin")
    parser.add_argument("--output", "-o", help="output file (written atomically, also with --input -); default stdout")
    parser.add_argument("--split", help=f"translate and score a split of the run's data ({', '.join(SPLITS)})")
    parser.add_argument("--data", help="prepared data directory for --split (default: the run's own)")
    parser.add_argument("--beam", type=int, help="beam width (1 = greedy)")
    parser.add_argument("--length-penalty", type=float, metavar="A",
                        help="GNMT length penalty α >= 0 (default: the α the run's experiment tuned on validation, "
                             "recorded in its results.json, else the run's decode.length_penalty)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--engine", choices=("posenc", "ctranslate2"), default="posenc",
                        help="posenc (PyTorch, default) or ctranslate2: --run is then a directory written by "
                             "posenc export --format ctranslate2 (--input/--output only)")
    parser.add_argument("--too-long", choices=("error", "truncate"), default="error",
                        help="a line over data.max_source_len tokens (or over 1 MiB): stop with its line number "
                             "(default), or truncate it with a warning")


def _input_lines(args: argparse.Namespace) -> Iterator[str]:
    """The lines of ``--input`` (``-``: stdin), each at most MAX_LINE_BYTES (``--too-long`` decides)."""
    return read_stdin_lines(args.too_long) if args.input == "-" else read_lines_lazily(args.input, args.too_long)


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
    if args.length_penalty is not None and not (0 <= args.length_penalty < float("inf")):
        raise ConfigError(f"--length-penalty must be a number >= 0, got {args.length_penalty}")
    if args.length_penalty is not None and args.engine == "ctranslate2":
        raise ConfigError("--length-penalty is for --engine posenc "
                          "(an export decodes with the options it was exported with)")
    if args.beam is not None and args.beam < 1:
        raise ConfigError(f"decode.beam (--beam) must be >= 1, got {args.beam}")
    if args.input and args.input != "-" and Path(args.input).is_dir():
        raise ConfigError(f"--input {args.input} is a directory, not a file")
    if args.beam is not None and args.beam > MAX_BEAM:
        raise ConfigError(f"--beam {args.beam} is over the limit of {MAX_BEAM} (decoding memory grows with "
                          "batch x beam); give a smaller beam")
    if args.output:  # before the model loads: never the input, a run's own file or a new directory tree
        inputs = (args.input,) if args.input and args.input != "-" else ()
        check_user_output(args.output, "--output", inputs)


class Progress:
    """Lines translated so far: a progress bar on a terminal, else a log line every ``every`` s.
    Called with the number of lines each decoded batch adds."""

    def __init__(self, every: float | None = None) -> None:
        self.every, self.start = PROGRESS_EVERY_S if every is None else every, time.monotonic()
        self.last, self.count = self.start, 0
        self.bar = tqdm(unit=" lines", file=sys.stderr, mininterval=0.5) if sys.stderr.isatty() else None

    def __call__(self, lines: int) -> None:
        self.count += lines
        if self.bar is not None:
            self.bar.update(lines)
            return
        now = time.monotonic()
        if lines and now - self.last >= self.every:
            self.last = now
            log.info("translated %d lines (%.1f lines/s)", self.count, self.count / max(now - self.start, 1e-9))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _to_file(loaded: LoadedRun, args: argparse.Namespace, opts: dict[str, Any]) -> int:
    """``--output FILE``: translate the input file or stdin into FILE (atomically)."""
    lines = _input_lines(args)
    progress = Progress()
    try:
        n = write_translations(loaded.model, loaded.tokenizer, lines, args.output, follow_symlink=True,
                               on_decoded=progress, **opts)
    finally:
        progress.close()
    print(f"translated {n} lines -> {args.output}", file=sys.stderr)
    return 0


def run_decode(loaded: LoadedRun, args: argparse.Namespace) -> DecodeConfig:
    """The run's decoding options, with the α its reported BLEU was decoded with when its
    experiment tuned α (results.json), and ``--beam`` / ``--length-penalty`` over both."""
    dc = loaded.cfg.decode if args.beam is None else replace(loaded.cfg.decode, beam=args.beam)
    alpha = args.length_penalty if args.length_penalty is not None else tuned_alpha(loaded.root)
    if alpha is not None and args.length_penalty is None:
        log.info("length penalty α = %g: the α tuned on validation for this run (results.json)", alpha)
    return dc if alpha is None else replace(dc, length_penalty=float(alpha))


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    with os_errors(_written(args)):
        return _run(args)


def _written(args: argparse.Namespace) -> str:
    """What the command writes, for an OS error that names no file."""
    if args.output:
        return str(args.output)
    return f"a file in {Path(args.run) / 'translations'}" if args.split else "standard output"


def _run_ctranslate2(args: argparse.Namespace) -> int:
    """``--engine ctranslate2``: translate ``--input`` with an export (serving/exported.py)."""
    from posenc.serving.exported import load_export

    if args.split:
        raise ConfigError("--engine ctranslate2 translates --input FILE (score the output with posenc evaluate), "
                          "not --split")
    model = load_export(args.run, device=args.device)
    opts = {**model.decode_options(args.beam), "too_long": args.too_long}
    lines = _input_lines(args)
    if args.output:
        n = model.write_translations(lines, args.output, **opts)
        print(f"translated {n} lines -> {args.output}", file=sys.stderr)
        return 0
    for out in model.translate_lines(lines, **opts):
        print(out)
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.engine == "ctranslate2":
        return _run_ctranslate2(args)
    loaded = load_run(args.run, args.checkpoint, args.device, confine=True)
    dc = run_decode(loaded, args)
    if args.split:
        with exclusive(loaded.root, advice="wait for it to finish"):  # never into a run another command writes
            scores = translate_split(loaded, args.split, dc, data_dir=args.data, user=True)  # never over results.json's
        print(json.dumps(scores, indent=2))
        print(f"{args.split}: {scores['bleu_text']} (signature {scores['bleu_signature']})", file=sys.stderr)
        return 0
    opts = {**decode_options(dc, loaded), "too_long": args.too_long}
    with torch.inference_mode():
        if args.output:
            return _to_file(loaded, args, opts)
        lines = _input_lines(args)
        for out in translate_lines(loaded.model, loaded.tokenizer, lines, **opts):
            print(out)
    return 0
