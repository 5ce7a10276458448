"""``posenc upgrade DIR...``: rewrite the runs and reports an older posenc wrote under each DIR in
today's format, once (:mod:`posenc.runs.upgrade`); every stored number stays as it is."""

from __future__ import annotations

import argparse
from pathlib import Path

from posenc.runs.ownership import MARKER_NAME
from posenc.runs.upgrade import Change, upgrade


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", metavar="DIR",
                        help="a directory of posenc's runs and reports (a grid's out_dir, runs/, one run)")


def run(args: argparse.Namespace) -> int:
    changes = upgrade(args.dirs)
    print(summary(changes) if changes else f"{', '.join(args.dirs)}: already in today's format")
    return 0


def summary(changes: list[Change]) -> str:
    """One line: how many directories were marked, files rewritten and files removed, in how many places."""
    marked = sum(c.path.name == MARKER_NAME for c in changes)
    removed = sum(c.text is None for c in changes)
    places = len({Path(c.path).parent for c in changes})
    return (f"upgraded {places} directories: {marked} marked, {len(changes) - marked - removed} files rewritten, "
            f"{removed} removed")
