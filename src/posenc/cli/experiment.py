"""``posenc experiment NAME|CONFIG [KEY=VALUE ...] [--jobs N|auto] [--rerun-stale] [--backend B] [--report-only]``:
run a grid and write its report (the results table, with each run's convergence status, is printed).
``--settings/--methods/--seeds A,B``: train only those cells of the grid, and write no report.
``--merge ARCHIVE``: place the cells a timed session brought back into the grid, then its report."""

from __future__ import annotations

import argparse

from posenc.config import check_int_text, shorten
from posenc.errors import ConfigError
from posenc.experiments.runner import run_experiment
from posenc.experiments.scheduler import parse_jobs
from posenc.experiments.subset import CellSubset


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="a shipped experiment name (e.g. quickstart) or a YAML file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. seeds=[1,2]")
    parser.add_argument("--jobs", default=1, metavar="N|auto", type=_number_or_word,
                        help="runs at once, each in its own process (spread round robin over the visible GPUs); "
                             "auto: min(cores // train.num_threads, runs) on a CPU, measured on CUDA (one run per GPU "
                             "more while the grid's updates/s rise by > 10 %%)")
    parser.add_argument("--rerun-stale", action="store_true",
                        help="retrain runs whose stored config fingerprint differs from the current config "
                             "(default: stop with one line naming the differing keys)")
    parser.add_argument("--backend", choices=("local", "submitit"), default="local",
                        help="local processes, or submitit (SLURM) for grids larger than one machine")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: write the report from the runs that are done and fresh "
                             "(the others are named and left out)")
    for name, what in (("settings", "setting labels"), ("methods", "method labels"), ("seeds", "seeds")):
        parser.add_argument(f"--{name}", metavar="A,B", help=f"train only the cells of these comma-separated {what} "
                            "(with the others' filters: all must hold) and write no report; default: every one")
    parser.add_argument("--merge", metavar="ARCHIVE",
                        help="train nothing: place the finished cells of a timed session's archive "
                             "(benchmarks/gpu_session.sh) into the grid's out_dir, each judged by the \"same run?\" "
                             "rule, never over a cell that is here, then regenerate the report")


def _number_or_word(value: str) -> int | str:
    """``--jobs`` as given: an int where it is one (checked by parse_jobs in :func:`run`)."""
    try:
        return int(value)
    except ValueError:
        return value


def run(args: argparse.Namespace) -> int:
    if args.merge:
        return merge(args)
    options = {"jobs": parse_jobs(args.jobs), "rerun_stale": args.rerun_stale, "backend": args.backend}
    if args.report_only:
        options["report_only"] = True
    subset = _subset(args)
    if not subset.everything:
        options["subset"] = subset
    report = run_experiment(args.config, args.overrides, **options)
    if not subset.everything:
        return 0  # no report: the runner said which runs are up to date
    summary = report / "README.md"
    text = summary.read_text(encoding="utf-8") if summary.is_file() else ""
    sections = text.split("\n## ")
    if len(sections) > 1:
        print("## " + sections[1].strip())  # the results table, with each run's convergence status
    print(f"\nreport: {summary if summary.is_file() else report}")
    return 0


def _subset(args: argparse.Namespace) -> CellSubset:
    """The cells ``--settings/--methods/--seeds`` ask for (every one when none is given)."""
    def labels(value: str | None) -> list[str]:
        return [v.strip() for v in (value or "").split(",") if v.strip()]

    seeds = labels(args.seeds)
    bad = [s for s in seeds if not (s.lstrip("-").isdigit() and s.isascii())]
    if bad or (args.seeds is not None and not seeds):
        raise ConfigError(f"--seeds must be comma-separated integers, got {shorten(args.seeds)}")
    numbers = [check_int_text(s, "--seeds") for s in seeds]  # each bounded before it is converted
    for flag in ("settings", "methods"):
        if getattr(args, flag) is not None and not labels(getattr(args, flag)):
            raise ConfigError(f"--{flag} names no label, got {getattr(args, flag)!r}")
    return CellSubset.of(labels(args.settings), labels(args.methods), numbers)


def merge(args: argparse.Namespace) -> int:
    """``--merge ARCHIVE``: one line per archived cell, then the counts; exit 1 when one was refused."""
    from posenc.experiments.runner import load_grid
    from posenc.window.merge import merge_archive

    other = {"--jobs": args.jobs != 1, "--backend": args.backend != "local", "--rerun-stale": args.rerun_stale,
             "--report-only": args.report_only, "--settings/--methods/--seeds": not _subset(args).everything}
    given = [flag for flag, on in other.items() if on]
    if given:
        raise ConfigError(f"--merge trains nothing: drop {', '.join(given)}")
    result = merge_archive(load_grid(args.config, args.overrides), args.merge)
    for line in result.lines:
        print(line)
    print(result.summary())
    return 1 if result.refused else 0
