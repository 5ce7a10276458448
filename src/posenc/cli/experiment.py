"""``posenc experiment NAME|CONFIG [KEY=VALUE ...]``: run a grid and write its report."""

from __future__ import annotations

import argparse

from posenc.experiments.runner import run_experiment


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="a shipped experiment name (e.g. quickstart) or a YAML file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. seeds=[1,2]")


def run(args: argparse.Namespace) -> int:
    report = run_experiment(args.config, args.overrides)
    summary = report / "README.md"
    text = summary.read_text(encoding="utf-8") if summary.is_file() else ""
    sections = text.split("\n## ")
    if len(sections) > 1:
        print("## " + sections[1].strip())  # the results table
    print(f"\nreport: {summary if summary.is_file() else report}")
    return 0
