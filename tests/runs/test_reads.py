"""What one Run reads, measured: a resumed run reads the checkpoint it resumes from once (each of its
files once, the Trainer never again), and a translation cell enters posenc/config.py at most three
times.

"Enters config.py": a call into one of its loading functions (:data:`LOADERS`: ``from_dict``,
``load_yaml``, ``load_config``) from code outside posenc/config.py (its own nested calls are one
entry), counted with a profiler hook, so every import style is seen. A checkpoint file read is a
call of training/checkpoint.py's readers of ``state.json``, ``config.yaml`` and the safetensors files.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest

import posenc.config
import posenc.training.checkpoint
from posenc.config import load_config
from posenc.experiments.tasks import task_of
from posenc.tasks.translation.experiment import ExperimentConfig
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.grids import grid_of_config, results_file, verdict_now

LOADERS = frozenset({"from_dict", "load_yaml", "load_config"})
#: training/checkpoint.py's readers → (their path argument, the file they read; None: the path's own).
READERS = {"_read_state": ("directory", "state.json"), "_read_config": ("directory", "config.yaml"),
           "_read_tensors": ("path", None)}


class Reads:
    """A profiler hook counting config.py entries (``entries``: ``loader <- caller``) and checkpoint
    file reads (``files``: ``ckpt_XXXXXXXX/name`` → reads)."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self.files: Counter[str] = Counter()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_filename == posenc.config.__file__ and code.co_name in LOADERS:
            caller = frame.f_back
            if caller is not None and caller.f_code.co_filename != posenc.config.__file__:
                self.entries.append(f"{code.co_name} <- {Path(caller.f_code.co_filename).name}:{caller.f_code.co_name}")
        elif code.co_filename == posenc.training.checkpoint.__file__ and code.co_name in READERS:
            argument, name = READERS[code.co_name]
            path = Path(frame.f_locals[argument])
            self.files[f"{path.name}/{name}" if name else f"{path.parent.name}/{path.name}"] += 1


def measured(fn: Any, *args: Any) -> tuple[Any, Reads]:
    """``fn(*args)`` and what it read (:class:`Reads`)."""
    reads = Reads()
    sys.setprofile(reads)
    try:
        return fn(*args), reads
    finally:
        sys.setprofile(None)


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Reads]]:
    """One translation cell trained (3 steps, a checkpoint each), then extended to 5 steps: what
    ``run_cell`` read each time."""
    root = tmp_path_factory.mktemp("reads")
    path = write_experiment(root, train={"save_every": 1, "keep_last": 0})
    grid = grid_of_config(load_config(ExperimentConfig, path))
    cell = grid.cells()[0]
    task = task_of(grid)
    task.prepare(grid, [cell])
    found = {}
    for label, overrides in (("new", []), ("extended", ["base.train.max_steps=5"])):
        grid = grid_of_config(load_config(ExperimentConfig, path, overrides))
        done = results_file(grid, cell)
        old = json.loads(done.read_text()) if done.is_file() else None
        verdict = verdict_now(grid, cell)
        assert (verdict.kind if verdict else None) == {"new": None, "extended": "extend"}[label]
        result, found[label] = measured(task.run_cell, grid, cell, verdict, old)
        done.write_text(json.dumps(result))
    yield found


def test_a_translation_cell_enters_config_py_at_most_three_times(cells: dict[str, Reads]) -> None:
    for label, reads in cells.items():
        assert len(reads.entries) <= 3, (label, reads.entries)


def test_a_resumed_run_reads_the_checkpoint_it_resumes_from_once(cells: dict[str, Reads]) -> None:
    """The extended cell resumes from ckpt_00000003: its state.json, config.yaml, weights and
    optimizer state are each read once (by the Run that opened it; the Trainer restores from what
    the Run loaded)."""
    resumed = {k: n for k, n in cells["extended"].files.items() if k.startswith("ckpt_00000003/")}
    assert resumed == {f"ckpt_00000003/{name}": 1 for name in
                       ("state.json", "config.yaml", "model.safetensors", "optim.safetensors")}
