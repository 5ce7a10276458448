"""``posenc train --config FILE [KEY=VALUE ...]``: train one run of any task, the one way every
run trains (:func:`~posenc.tasks.base.run_task`); torchrun-ready.

The task is the config's ``task:`` key (or a ``task=NAME`` override), the key ``posenc experiment``
reads; without one, translation (which prepares its data first if needed)."""

from __future__ import annotations

import argparse
import json

from posenc.cli.common import add_config_arguments, run_config
from posenc.files import os_errors
from posenc.tasks.base import run_task


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--no-resume", action="store_true", help="start afresh even if checkpoints exist")


def run(args: argparse.Namespace) -> int:
    task, cfg = run_config(args)
    with os_errors(f"a file in {cfg.out_dir}"):  # a read-only or full disk: one line, not a traceback
        summary = run_task(task.new_task(), cfg, resume=not args.no_resume).summary
    print(json.dumps(summary, indent=2))
    return 0
