"""run_task writes the run directory only after the Trainer has restored the checkpoint it
resumes from (issue 19: one checkpoint load, validated before the first byte is written)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from posenc.errors import CheckpointError
from posenc.tasks.base import run_task
from tests.dummy_task import DummyConfig, DummyTask


def _config(out: Path, max_steps: int) -> DummyConfig:
    cfg = DummyConfig(out_dir=str(out))
    return replace(cfg, train=replace(cfg.train, max_steps=max_steps))


def _latest(out: Path) -> Path:
    return max((p for p in (out / "checkpoints").iterdir() if p.name.startswith("ckpt_")), key=lambda p: p.name)


def test_a_checkpoint_that_does_not_restore_leaves_the_run_directory_untouched(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_task(DummyTask(), _config(out, 4))
    state_path = _latest(out) / "state.json"
    state = json.loads(state_path.read_text())
    del state["train"]  # the training state of the checkpoint resumed from is unusable
    state_path.write_text(json.dumps(state))
    before = {p: p.is_dir() or p.read_bytes() for p in out.rglob("*")}
    with pytest.raises(CheckpointError, match="optimizer/training state does not fit"):
        run_task(DummyTask(), _config(out, 6))  # a raised cap: would rewrite config.yaml
    after = {p: p.is_dir() or p.read_bytes() for p in out.rglob("*")}
    assert after == before  # config.yaml still says 4 steps, nothing added or removed


def test_resuming_continues_and_updates_the_run_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = run_task(DummyTask(), _config(out, 4))
    resumed = run_task(DummyTask(), _config(out, 6))
    assert (first.result.state.step, resumed.result.state.step) == (4, 6)
    assert "max_steps: 6" in (out / "config.yaml").read_text()


def test_a_restart_refused_by_the_trainer_leaves_the_old_run(tmp_path: Path) -> None:
    """--no-resume (resume=False) clears the old outputs only once the Trainer has started: a
    config the Trainer refuses (a metric every N updates, but the task has no metric) keeps them."""
    out = tmp_path / "run"
    run_task(DummyTask(), _config(out, 4))
    before = {p: p.is_dir() or p.read_bytes() for p in out.rglob("*")}
    cfg = _config(out, 4)
    cfg = replace(cfg, train=replace(cfg.train, metric_every=2))
    with pytest.raises(Exception, match="metric"):
        run_task(DummyTask(), cfg, resume=False)
    assert {p: p.is_dir() or p.read_bytes() for p in out.rglob("*")} == before
