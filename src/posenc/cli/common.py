"""Argument helpers shared by subcommands."""

from __future__ import annotations

import argparse
from typing import Any

import torch

from posenc.config import from_dict, load_yaml, merge_overrides, shorten
from posenc.errors import ConfigError
from posenc.experiments.task_grid import TaskGrid
from posenc.experiments.tasks import find_task
from posenc.positions.config import METHOD_ALIASES, MODEL_ALIASES

#: The task of a run config without a ``task:`` key.
DEFAULT_TASK = "translation"


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="YAML run config")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. model.d_model=256")


def documented_methods() -> str:
    """The papers' method names (the position config's aliases), for error messages."""
    names = sorted(set(MODEL_ALIASES) | set(METHOD_ALIASES))
    return f"{', '.join(names)}, or combinations such as ape+shaw, ape+rpe, rnn+shape"


def run_config(args: argparse.Namespace) -> tuple[TaskGrid, Any]:
    """The task and the run config of ``--config FILE`` and the ``KEY=VALUE`` overrides.

    The task is the config's ``task:`` key (a ``task=NAME`` override wins; default translation),
    found as ``posenc experiment`` finds it (:func:`~posenc.experiments.tasks.find_task`); the rest
    is validated by that task's run schema.

    Args:
        args: the parsed command line (``config``, ``overrides``).

    Returns:
        ``(task, cfg)``: the task (its ``new_task()`` trains ``cfg``) and the run config.

    Raises:
        ConfigError: one line, for an unknown task or a bad config.
    """
    data = load_yaml(args.config) if args.config is not None else {}
    ref = data.pop("task", DEFAULT_TASK)
    overrides = []
    for text in args.overrides:
        key, _, value = text.partition("=")
        if key.strip() == "task":
            ref = value.strip()
        else:
            overrides.append(text)
    if not isinstance(ref, str) or not ref:
        raise ConfigError(f"task: a task name or module path, got {shorten(ref)}")
    task = find_task(ref)
    try:
        return task, from_dict(task.run_config, merge_overrides(data, overrides, task.run_config))
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
