"""``posenc train --config FILE [KEY=VALUE ...]``: prepare (if needed) and train; torchrun-ready."""

from __future__ import annotations

import argparse
import json

from posenc.cli.common import add_config_arguments, run_config
from posenc.files import os_errors
from posenc.tasks.translation.task import train_run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--no-resume", action="store_true", help="start afresh even if checkpoints exist")


def run(args: argparse.Namespace) -> int:
    cfg = run_config(args)
    with os_errors(f"a file in {cfg.out_dir}"):  # a read-only or full disk: one line, not a traceback
        summary = train_run(cfg, resume=not args.no_resume)
    print(json.dumps(summary, indent=2))
    return 0
