"""Argument helpers shared by subcommands."""

from __future__ import annotations

import argparse

from posenc.config import load_config
from posenc.pipeline.config import RunConfig


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="YAML run config")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. model.d_model=256")


def run_config(args: argparse.Namespace) -> RunConfig:
    return load_config(RunConfig, args.config, args.overrides)
