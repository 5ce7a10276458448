"""Argument helpers shared by subcommands."""

from __future__ import annotations

import argparse

import torch

from posenc.config import load_config
from posenc.errors import ConfigError
from posenc.positions.config import METHOD_ALIASES, MODEL_ALIASES
from posenc.tasks.translation.config import RunConfig


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="YAML run config")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. model.d_model=256")


def documented_methods() -> str:
    """The papers' method names (the position config's aliases), for error messages."""
    names = sorted(set(MODEL_ALIASES) | set(METHOD_ALIASES))
    return f"{', '.join(names)}, or combinations such as ape+shaw, ape+rpe, rnn+shape"


def run_config(args: argparse.Namespace) -> RunConfig:
    try:
        return load_config(RunConfig, args.config, args.overrides)
    except ConfigError as err:
        if "unknown position method" in str(err):
            raise ConfigError(f"{err}; documented names: {documented_methods()}") from None
        raise


def check_device(name: str) -> str:
    """A ``--device`` value usable on this machine (cpu, cuda, cuda:N), else a one-line ConfigError."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"--device {name!r}: not a device (use cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {name}: no CUDA device is available on this machine (use --device cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise ConfigError(f"--device {name!r}: unsupported device type (use cpu, cuda or cuda:N)")
    return name
