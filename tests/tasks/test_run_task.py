"""run_task writes the run directory only after the Trainer has restored the checkpoint it
resumes from (issue 19: one checkpoint load, validated before the first byte is written)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from posenc.errors import CheckpointError, ConfigError
from posenc.tasks.base import run_task
from tests.dummy_task import DummyConfig, DummyTask


def _config(out: Path, max_steps: int) -> DummyConfig:
    """Noam: its learning rates do not depend on max_steps, so a raised cap extends the run (under
    the dummy's cosine schedule a new cap is another run: runs/fingerprint.HORIZON_KEYS)."""
    cfg = DummyConfig(out_dir=str(out))
    return replace(cfg, train=replace(cfg.train, max_steps=max_steps, schedule="noam"))


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


class _CountingTask(DummyTask):
    """The dummy task, noting which rank evaluated."""

    def evaluate(self, cfg: DummyConfig, model, out_dir: Path, result=None) -> dict:
        import os

        Path(out_dir, f"evaluated_by_rank{os.environ['RANK']}").touch()
        return super().evaluate(cfg, model, out_dir)


def _ddp_worker(rank: int, port: int, out: str) -> None:
    import os

    import torch

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    run = run_task(_CountingTask(), _config(Path(out) / "run", 2))
    Path(out, f"metrics{rank}.json").write_text(json.dumps(run.metrics))


def test_under_ddp_only_rank_0_evaluates(tmp_path: Path) -> None:
    """Rank 0 evaluates and writes eval.json; rank 1 trains with it but writes nothing of its own."""
    import socket

    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed/gloo not available")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    assert sorted(p.name for p in (tmp_path / "run").glob("evaluated_by_rank*")) == ["evaluated_by_rank0"]
    assert set(json.loads((tmp_path / "metrics0.json").read_text())) == {"mse"}
    assert json.loads((tmp_path / "metrics1.json").read_text()) == {}


def test_a_cosine_run_is_not_resumed_under_another_cap(tmp_path: Path) -> None:
    """Cosine decays over max_steps: resuming a 4-step cosine run with a 6-step cap would train
    neither, so it is refused with one line naming the cap, and nothing is written."""
    out = tmp_path / "run"
    cfg = DummyConfig(out_dir=str(out))
    run_task(DummyTask(), replace(cfg, train=replace(cfg.train, max_steps=4)))
    before = {p: p.is_dir() or p.read_bytes() for p in out.rglob("*")}
    with pytest.raises(ConfigError, match=r"train.max_steps \(4 -> 6\)"):
        run_task(DummyTask(), replace(cfg, train=replace(cfg.train, max_steps=6)))
    assert {p: p.is_dir() or p.read_bytes() for p in out.rglob("*")} == before
