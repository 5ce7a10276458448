"""One grid cell in its own process: ``python -m posenc.experiments.worker SPEC GROUP METHOD SEED``
(the fields of :class:`~posenc.experiments.experiment.Cell`; GROUP is empty in a grid without groups).

``SPEC`` is the experiment JSON written by :func:`posenc.experiments.scheduler.write_spec`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

from posenc.config import from_dict
from posenc.errors import PosencError
from posenc.experiments.experiment import Cell
from posenc.experiments.judgements import Judgements
from posenc.experiments.tasks import find_task, task_of
from posenc.processes import interrupt_exit_code, interrupt_on_signals


def run_cell(spec: str, group: str, method: str, seed: int) -> dict[str, Any]:
    """Bring one cell up to date (train/score) and return its results (used by both backends)."""
    threads = int(os.environ.get("POSENC_NUM_THREADS", "0"))
    if threads > 0:
        import torch

        torch.set_num_threads(threads)
    with open(spec, encoding="utf-8") as fh:
        data = json.load(fh)
    task = find_task(data["task"])  # looked up once in this process
    exp = task.experiment(from_dict(task.experiment_config, data))  # the task's own schema
    return Judgements().execute(task, exp, Cell(group, method, int(seed)))


def execute(options: Any, cell: Cell) -> dict[str, Any]:
    """Bring one cell of the experiment config ``options`` up to date in this process (a submitit
    job), its task looked up once."""
    task = task_of(options)
    return Judgements().execute(task, task.experiment(options), cell)


def main(argv: list[str]) -> int:
    """Run one cell; SIGTERM (sent by the scheduler when the grid stops) unwinds it like Ctrl-C,
    so temporary files and the run's lock are cleaned up before the worker exits. A user error
    (:class:`~posenc.errors.PosencError`) is one ``error:`` line in the worker's log and exit 2."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    spec, group, method, seed = argv
    try:
        with interrupt_on_signals():
            result = run_cell(spec, group, method, int(seed))
    except KeyboardInterrupt as err:
        print("worker: interrupted", file=sys.stderr, flush=True)
        return interrupt_exit_code(err)
    except PosencError as err:  # a user error (config, data, run directory): one line, no traceback
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    print(json.dumps({k: result[k] for k in ("setting", "task", "method", "seed", "summary") if k in result},
                     default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
