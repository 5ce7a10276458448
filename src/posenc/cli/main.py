"""The ``posenc`` console script: thin subcommands over library functions.

Every subcommand takes ``--config FILE`` (YAML) where relevant plus dotted overrides
(``model.position.name=shape model.position.max_shift=500``). User errors print one line,
``error: ...``, and exit with status 2; warnings print one line, ``warning: ...``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from posenc.errors import PosencError
from posenc.processes import interrupt_exit_code

#: name → module path; each module defines ``add_arguments(parser)`` and ``run(args) -> int``.
COMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("posenc.cli.prepare", "build a prepared data directory (corpus, setting, SentencePiece)"),
    "train": ("posenc.cli.train", "train one run of any task (the config's task: key, default translation)"),
    "translate": ("posenc.cli.translate", "translate a file with a trained run (beam search, streaming)"),
    "evaluate": ("posenc.cli.evaluate", "detokenized sacreBLEU and chrF of a hypothesis file"),
    "average": ("posenc.cli.average", "average the last N checkpoints of a run"),
    "export": ("posenc.cli.export", "write a trained run for another inference engine (CTranslate2)"),
    "experiment": ("posenc.cli.experiment", "run a grid of methods x settings x seeds and write a report"),
    "analyze": ("posenc.cli.analyze", "run one of the papers' analyses on trained runs"),
    "queue": ("posenc.cli.queue", "a timed session's grid cells: pack their data beforehand, run them to a deadline"),
    "upgrade": ("posenc.cli.upgrade", "rewrite the runs and reports an older posenc wrote in today's format, once"),
}


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="posenc", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(module)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; ``KEY=VALUE`` overrides may also follow the options
    (``posenc experiment NAME --jobs 4 seeds=[1,2]``), anything else unknown is an error."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in t and not t.startswith("-") for t in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     line: str | None = None) -> str:
    """A warning as the CLI prints it, ``warning: <message>`` on one line: the user is told what
    happened (a truncated line, a slower fallback), not where in posenc's source it was said."""
    text = " ".join(str(message).split())
    return f"warning: {text}\n"


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """Warnings printed inside as :func:`one_line_warning` (the filters, and anything that records
    warnings instead of printing them, such as pytest, are left as they are)."""
    before = warnings.formatwarning
    warnings.formatwarning = one_line_warning
    try:
        yield
    finally:
        warnings.formatwarning = before


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    run: Callable[[argparse.Namespace], int] = args._run
    try:
        with one_line_warnings():
            return int(run(args) or 0)
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        print("error: interrupted", file=sys.stderr)
        return interrupt_exit_code(err)  # 130 for Ctrl-C / SIGINT, 143 for SIGTERM


if __name__ == "__main__":
    sys.exit(main())
