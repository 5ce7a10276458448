"""examples/drop_in_positions.py runs as written: each posenc method trains a plain PyTorch LM, SHAPE
and CAPE move the positions in training only, RoPE and ALiBi see only distances."""

from __future__ import annotations

import math
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "drop_in_positions.py"


@pytest.fixture(scope="module")
def example() -> dict:
    return runpy.run_path(str(EXAMPLE))


@pytest.fixture(scope="module")
def results(example: dict) -> dict:
    return example["main"](["--steps", "30"])


def test_every_method_trains_and_gives_logits_per_token(example: dict, results: dict) -> None:
    assert set(results) == {"shape", "cape", "rope", "alibi"}
    for method, r in results.items():
        losses = r["losses"]
        assert len(losses) == 30 and all(math.isfinite(x) for x in losses), method
        assert losses[-1] < losses[0] - 1.0, (method, losses)  # the toy task is learnt
        assert r["shape"] == (4, 12, example["VOCAB"]) and r["deterministic"], method


def test_shape_shifts_each_sequence_by_an_integer_in_training_only(example: dict, results: dict) -> None:
    r = results["shape"]
    offsets = r["train_positions"] - r["eval_positions"]
    assert torch.equal(r["eval_positions"], torch.arange(12.0).expand(4, 12))
    assert torch.equal(offsets, offsets[:, :1].expand_as(offsets))  # one shift per sequence
    assert torch.equal(offsets, offsets.round()) and 0 <= offsets.min() and offsets.max() <= example["MAX_SHIFT"]


def test_cape_moves_positions_continuously_in_training_only(results: dict) -> None:
    r = results["cape"]
    train = r["train_positions"]
    assert torch.equal(r["eval_positions"], torch.arange(12.0).expand(4, 12))
    assert not torch.equal(train, train.round())  # jitter: real-valued positions
    assert bool((train.diff(dim=1) > 0).all())  # a local shift below 0.5 keeps the order


def test_absolute_methods_see_a_shift_and_relative_ones_do_not(results: dict) -> None:
    for method in ("rope", "alibi"):
        r = results[method]
        assert torch.equal(r["train_positions"], r["eval_positions"]) and not r["shift_changes_logits"], method
    assert results["shape"]["shift_changes_logits"] and results["cape"]["shift_changes_logits"]


def test_the_script_runs_from_the_command_line() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "2"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["shape", "cape", "rope", "alibi"]
    assert all("logits (4, 12, 32)" in line for line in lines)
