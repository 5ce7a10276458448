"""``posenc queue pack QUEUE DIR`` | ``posenc queue run QUEUE --until EPOCH --archive FILE [--payload DIR]``:
a timed session's grid cells (benchmarks/gpu_session.sh). ``pack`` prepares here, beforehand, the
data of every cell the queue file lists and writes it to DIR; ``run`` places that data, then trains
the queue's cells in priority order until the deadline and keeps the finished ones in one archive
(``posenc experiment NAME --merge FILE`` brings them into the grid)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from posenc.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("pack", "run"), help="pack: prepare the data; run: train until --until")
    parser.add_argument("queue", help="the queue file (YAML: entries in priority order; benchmarks/gpu_queue.yaml)")
    parser.add_argument("dir", nargs="?", help="pack: the folder to write the prepared data to (e.g. .device)")
    parser.add_argument("--until", type=float, metavar="EPOCH",
                        help="run: the deadline, in seconds since the epoch (date +%%s): no cell starts that could "
                             "not finish by then, and the cells still running then are stopped")
    parser.add_argument("--archive", metavar="FILE", help="run: the archive of the finished cells (.tar.gz)")
    parser.add_argument("--payload", metavar="DIR", help="run: the folder pack wrote; its data is placed first")


def run(args: argparse.Namespace) -> int:
    if args.action == "pack":
        return pack(args)
    if args.until is None or not args.archive:
        raise ConfigError("posenc queue run needs --until EPOCH and --archive FILE")
    if args.dir:
        raise ConfigError(f"posenc queue run takes no folder ({args.dir!r}); give the packed one as --payload")
    if args.until <= time.time():
        raise ConfigError(f"--until {args.until:.0f} has already passed (now {time.time():.0f})")
    from posenc.window.intake import check_archive_output
    from posenc.window.queue import run_queue

    check_archive_output(args.archive)

    run_queue(args.queue, args.until, args.archive, args.payload)  # its last line says what it gave
    return 0


def pack(args: argparse.Namespace) -> int:
    if not args.dir:
        raise ConfigError("posenc queue pack needs the folder to write to (e.g. .device)")
    if args.until is not None or args.archive or args.payload:
        raise ConfigError("posenc queue pack takes only QUEUE and DIR")
    from posenc.window.payload import pack as pack_cells
    from posenc.window.queue import load_queue, queue_cells

    print(pack_cells(queue_cells(load_queue(args.queue)), Path(args.dir)))
    return 0
