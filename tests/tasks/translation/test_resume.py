"""Re-running ``posenc train`` with a larger ``train.max_steps`` continues exactly where it stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.tiny import cli, run_overrides

# real learning rate and dropout (transformer-tiny's 0.1), so RNG state and optimizer state matter;
# 60 pairs at 400 tokens per batch is a few batches per epoch, so 6 steps cross an epoch boundary
RESUME = ["train.lr=1.0", "model.position.name=shape", "model.position.max_shift=20"]


def _train(capsys: pytest.CaptureFixture[str], run: Path, data: Path, steps: int, *extra: str,
           process_seed: int | None = 0) -> dict:
    """``posenc train``; ``process_seed`` seeds torch's global RNG first, as a fresh process would
    be if the initial weights did not depend on it (see test_initial_weights_follow_train_seed)."""
    if process_seed is not None:
        torch.manual_seed(process_seed)
    code, out, err = cli(capsys, "train", *run_overrides(run, data, *RESUME), f"train.max_steps={steps}", *extra)
    assert code == 0, err
    return json.loads(out)


def _model(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"ckpt_{step:08d}" / "model.safetensors"))


def test_resume_equals_one_go(capsys: pytest.CaptureFixture[str], tmp_path: Path, toy_prepared: Path) -> None:
    one_go = _train(capsys, tmp_path / "a", toy_prepared, 6)
    assert one_go["steps"] == 6 and one_go["epochs"] >= 1  # crossed an epoch boundary

    first = _train(capsys, tmp_path / "b", toy_prepared, 3)
    assert first["steps"] == 3
    resumed = _train(capsys, tmp_path / "b", toy_prepared, 6)  # the same command, a larger limit
    assert resumed["steps"] == 6 and resumed["tokens"] == one_go["tokens"] and resumed["epochs"] == one_go["epochs"]

    a, b = _model(tmp_path / "a", 6), _model(tmp_path / "b", 6)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    three = _model(tmp_path / "b", 3)
    assert any(not torch.equal(three[k], a[k]) for k in a)  # steps 4-6 did change the weights
    optim_a = load_file(str(tmp_path / "a" / "checkpoints" / "ckpt_00000006" / "optim.safetensors"))
    optim_b = load_file(str(tmp_path / "b" / "checkpoints" / "ckpt_00000006" / "optim.safetensors"))
    assert optim_a.keys() == optim_b.keys() and all(torch.equal(optim_a[k], optim_b[k]) for k in optim_a)


def test_rerun_at_the_limit_changes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path, toy_prepared: Path) -> None:
    run = tmp_path / "run"
    _train(capsys, run, toy_prepared, 3)
    ckpt = run / "checkpoints" / "ckpt_00000003"
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    again = _train(capsys, run, toy_prepared, 3)
    assert again["steps"] == 3
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["ckpt_00000003"]
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before


def test_resume_with_another_model_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path, toy_prepared: Path) -> None:
    run = tmp_path / "run"
    _train(capsys, run, toy_prepared, 3)
    code, _, err = cli(capsys, "train", *run_overrides(run, toy_prepared, *RESUME), "train.max_steps=6", "model.d_ff=48")
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert "d_ff" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["ckpt_00000003"]


def test_resume_under_a_cap_below_the_trained_steps_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              toy_prepared: Path) -> None:
    """max_steps 6 -> 3 cannot be honoured by resuming from step 6: a stale run (one line naming
    max_steps and the steps trained), nothing written; the old code resumed it as an 'extend'."""
    run = tmp_path / "run"
    _train(capsys, run, toy_prepared, 6)
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code, _, err = cli(capsys, "train", *run_overrides(run, toy_prepared, *RESUME), "train.max_steps=3")
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "train.max_steps (6 -> 3)" in err and "6 steps already trained" in err
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_finished_run_without_checkpoints_is_not_trained_again(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path, toy_prepared: Path) -> None:
    """A finished run copied back without its resumable checkpoints (summary.json kept): the old
    code started again at step 0 in that directory, over its files; now one line, exit 2, nothing
    changed; --no-resume still starts afresh."""
    import shutil

    run = tmp_path / "run"
    _train(capsys, run, toy_prepared, 3)
    shutil.rmtree(run / "checkpoints" / "ckpt_00000003")
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code, _, err = cli(capsys, "train", *run_overrides(run, toy_prepared, *RESUME), "train.max_steps=3")
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "finished run but no checkpoint to resume from" in err and str(run) in err
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    code, out, _ = cli(capsys, "train", "--no-resume", *run_overrides(run, toy_prepared, *RESUME), "train.max_steps=3")
    assert code == 0 and json.loads(out)["steps"] == 3


def test_no_resume_starts_afresh(capsys: pytest.CaptureFixture[str], tmp_path: Path, toy_prepared: Path) -> None:
    run = tmp_path / "run"
    _train(capsys, run, toy_prepared, 3)
    first = _model(run, 3)
    torch.manual_seed(0)
    code, out, _ = cli(capsys, "train", "--no-resume", *run_overrides(run, toy_prepared, *RESUME), "train.max_steps=3")
    assert code == 0 and json.loads(out)["steps"] == 3
    again = _model(run, 3)
    assert all(torch.equal(first[k], again[k]) for k in first)  # same seed, same data: same weights


def test_initial_weights_follow_train_seed(capsys: pytest.CaptureFixture[str], tmp_path: Path, toy_prepared: Path) -> None:
    """The same command in two fresh processes (different global RNG states) gives the same run."""
    _train(capsys, tmp_path / "a", toy_prepared, 3, process_seed=123)
    _train(capsys, tmp_path / "b", toy_prepared, 3, process_seed=456)
    a, b = _model(tmp_path / "a", 3), _model(tmp_path / "b", 3)
    assert all(torch.equal(a[k], b[k]) for k in a)
