"""``posenc analyze NAME --experiment CONFIG [--setting S] [--methods A,B]``: one analysis on an
experiment's runs (``--methods``: on some of its methods, e.g. those whose runs are all trained).

The analyses (SHAPE Table 1, Fig. 2-4; Neishi Fig. 3-7, Table 4; CAPE Fig. 8) write CSV + PNG.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from posenc.analysis.grid_part import run_analysis
from posenc.analysis.registry import REGISTRY, fitting
from posenc.config import load_config, load_yaml
from posenc.errors import ConfigError
from posenc.experiments.runner import check_report_dir, find_experiment
from posenc.experiments.tasks import task_module
from posenc.runs.ownership import check_outside_posenc_dirs, check_target, write_marker
from posenc.runs.spec import declared
from posenc.tasks.translation.experiment import ExperimentConfig
from posenc.tasks.translation.report import setting_part


def add_arguments(parser: argparse.ArgumentParser) -> None:
    names = ", ".join(f"{k} ({a.description})" for k, a in REGISTRY.items())
    parser.add_argument("name", help=f"analysis: {names}")
    parser.add_argument("--experiment", "-e", required=True, help="experiment name or YAML (its runs must be trained)")
    parser.add_argument("--setting", help="setting label (default: every setting)")
    parser.add_argument("--out", help="output directory (default: the experiment's report/SETTING/NAME; "
                        "required with --methods other than the experiment's own list)")
    parser.add_argument("--methods", help="comma-separated method labels to analyze, the first the baseline "
                        "(default: every method of the experiment); the result goes to --out, never over "
                        "the report's analysis of every method")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")


def carried_by(task: str) -> frozenset[str]:
    """What the runs of ``task`` carry for the analyses (its RunSpec's ``carries``; its package
    declares the spec when imported); nothing for a task that declares none."""
    task_module(task)
    return next((spec.carries for spec in declared() if spec.task == task), frozenset())


def run(args: argparse.Namespace) -> int:
    name = args.name.replace("-", "_")
    if name not in REGISTRY:
        raise ConfigError(f"unknown analysis {args.name!r} (known: {', '.join(REGISTRY)})")
    path = find_experiment(args.experiment)
    task = str(load_yaml(path).get("task", "translation"))
    fitting(name, task, carried_by(task))  # an analysis the task's runs cannot feed: one line, before anything
    exp = load_config(ExperimentConfig, path, args.overrides)
    if args.methods is not None:
        chosen = exp.with_methods([label.strip() for label in args.methods.split(",") if label.strip()])
        if list(chosen.methods) != list(exp.methods) and not args.out:
            raise ConfigError(f"--methods {args.methods} is not every method of {exp.name} in its order "
                              f"({','.join(exp.methods)}): give --out, the report's folder holds every method")
        exp = chosen
    settings = [args.setting] if args.setting else list(exp.settings)
    for setting in settings:
        if setting not in exp.settings:
            raise ConfigError(f"unknown setting {setting!r} (known: {', '.join(exp.settings)})")
    # what posenc writes into is new, empty or a report it wrote: never a user's files (--out
    # itself and each --out/SETTING, all checked before any analysis runs)
    top = Path(args.out) if args.out else exp.root / "report"
    if args.out:
        check_outside_posenc_dirs(top, "--out")  # never a new directory inside a run, an export, data ...
        for where in (top, *(top / s for s in settings)):
            check_target(where, "report", "--out")
    else:
        check_report_dir(exp)
    for setting in settings:
        out = top / setting if args.out else top / setting / name
        run_analysis(setting_part(exp, setting), name, exp.analysis_options, out)  # pooled, or one out/seedN per seed
        if args.out:
            write_marker(out, "report")
        write_marker(top, "report")
        print(f"{name} ({setting}) -> {out}")
    return 0
