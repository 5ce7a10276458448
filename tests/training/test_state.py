"""Best-N checkpoint averaging, pruning that keeps the best, resume, patience and the
convergence summary, on a tiny model whose validation losses are hand-made."""

import json
from pathlib import Path

import pytest
import torch

from posenc.training import load_checkpoint
from posenc.training.averaging import best_steps
from tests.helpers.training import HandValidLoss, batch_of, batches_fn, random_pairs, tiny_model, train, train_config

TRAIN = batches_fn(random_pairs(40, seed=2), max_tokens=48)
VALID = [batch_of(random_pairs(4, seed=9))]




def _run(out: Path, losses: list[float], **cfg) -> object:
    base = dict(max_steps=len(losses), validate_every=1, save_every=1)
    return train(tiny_model(), TRAIN, train_config(**{**base, **cfg}), out, valid_batches=VALID,
                 loss_fn=HandValidLoss(losses))


def _names(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "checkpoints").iterdir())


def test_best_steps_by_hand() -> None:
    history = [[1, 5.0], [2, 1.0], [3, 4.0], [4, 2.0], [5, 2.0]]
    assert best_steps(history, [1, 2, 3, 4, 5], 2) == [2, 5]  # tie 4/5: the later step
    assert best_steps(history, [1, 3, 4], 2) == [3, 4]  # only saved checkpoints count
    assert best_steps(history, [6], 2) == []  # no validation at step 6


def test_average_best_picks_lowest_valid_loss_and_pruning_keeps_them(tmp_path: Path) -> None:
    losses = [5.0, 1.0, 4.0, 2.0, 6.0, 7.0]
    result = _run(tmp_path, losses, keep_last=2, average_best=2)
    # keep_last=2 keeps 5 and 6; the best two (2 and 4) are never pruned
    assert _names(tmp_path) == ["average", "ckpt_00000002", "ckpt_00000004", "ckpt_00000005", "ckpt_00000006"]
    assert result.averaged_from == ["ckpt_00000002", "ckpt_00000004"]
    a, b = (load_checkpoint(tmp_path / "checkpoints" / n).model for n in result.averaged_from)
    avg = load_checkpoint(result.average).model
    for key in avg:
        torch.testing.assert_close(avg[key], ((a[key].double() + b[key].double()) / 2).to(a[key].dtype), rtol=0, atol=0)
    for step, loss in enumerate(losses, 1):
        if (tmp_path / "checkpoints" / f"ckpt_{step:08d}").exists():
            state = load_checkpoint(tmp_path / "checkpoints" / f"ckpt_{step:08d}", with_optimizer=False).state
            assert state["valid_loss"] == pytest.approx(loss)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["best_step"] == 2 and summary["best_valid"] == pytest.approx(1.0)
    # capped by max_steps: never "converged", whatever the curve (training/convergence.py)
    assert summary["stopped"] == "max_steps" and summary["converged"] is False
    assert summary["averaged_from"] == result.averaged_from
    assert summary["device"] == "cpu"  # where it trained (a GPU's run names its GPU: device.device_label)


def test_average_last_still_averages_the_newest(tmp_path: Path) -> None:
    result = _run(tmp_path, [5.0, 1.0, 4.0, 2.0], keep_last=2, average_last=2)
    assert result.averaged_from == ["ckpt_00000003", "ckpt_00000004"]
    assert _names(tmp_path) == ["average", "ckpt_00000003", "ckpt_00000004"]


def test_resume_keeps_the_best(tmp_path: Path) -> None:
    losses = [5.0, 1.0, 4.0, 2.0, 6.0, 7.0]
    _run(tmp_path, losses[:4], keep_last=2, average_best=2)
    resumed = train(tiny_model(seed=5), TRAIN, train_config(max_steps=6, validate_every=1, save_every=1, keep_last=2, average_best=2),
                    tmp_path, valid_batches=VALID, loss_fn=HandValidLoss(losses[4:]))
    assert [s for s, _ in resumed.state.valid_history] == [1, 2, 3, 4, 5, 6]  # survived the resume
    assert resumed.averaged_from == ["ckpt_00000002", "ckpt_00000004"]
    assert "ckpt_00000002" in _names(tmp_path) and "ckpt_00000003" not in _names(tmp_path)


def test_patience_stops_and_min_delta_counts_small_gains_as_none(tmp_path: Path) -> None:
    result = _run(tmp_path / "a", [3.0, 2.0, 2.5, 2.4, 1.0, 1.0], patience=2, save_every=0)
    assert result.stopped == "patience" and result.state.step == 4
    assert result.summary()["best_step"] == 2  # status: tests/training/test_convergence.py
    small = _run(tmp_path / "b", [3.0, 2.99, 2.98, 1.0], patience=2, min_delta=0.01, save_every=0)
    assert small.stopped == "patience" and small.state.step == 3
    plain = _run(tmp_path / "c", [3.0, 2.99, 2.98, 1.0], patience=2, save_every=0, min_delta=0.0)
    assert plain.stopped == "max_steps" and plain.summary()["converged"] is False


def test_average_best_needs_validation_at_checkpoints() -> None:
    from posenc.errors import ConfigError

    with pytest.raises(ConfigError, match="average_best"):
        train_config(average_best=2, validate_every=2, save_every=3)


def test_min_delta_abs_sees_the_plateau_of_a_loss_near_zero(tmp_path: Path) -> None:
    # Relative gains of 90 % per validation (a solved task's loss: 1e-2 → 1e-3 → ...) never
    # plateau under the relative rule; with min_delta_abs = 0.005 nats 0.001 is the last gain.
    losses = [0.5, 0.01, 0.001, 0.0001, 0.00001, 0.000001]
    relative = _run(tmp_path / "rel", losses, patience=2, save_every=0, min_delta=0.01)
    assert relative.stopped == "max_steps"
    absolute = _run(tmp_path / "abs", losses, patience=2, save_every=0, min_delta=0.01, min_delta_abs=0.005)
    assert absolute.stopped == "patience" and absolute.state.step == 5
    assert absolute.summary()["best_step"] == 5  # the lowest loss seen is still the best step


def test_min_delta_abs_must_be_non_negative() -> None:
    from posenc.errors import ConfigError

    with pytest.raises(ConfigError, match="min_delta_abs"):
        train_config(min_delta_abs=-1.0)


def test_fixed_budget_with_last_n_averaging_is_the_papers_protocol(tmp_path: Path) -> None:
    """SHAPE App. B: a fixed number of updates, no early stop, the last N checkpoints (one per
    checkpoint interval) averaged whatever the validation says: patience null + average_last."""
    losses = [1.0, 5.0, 6.0, 7.0]  # best at the first validation; patience would have stopped at step 4
    result = _run(tmp_path, [9.0] * 8, max_steps=8, validate_every=2, save_every=2, keep_last=3, average_last=3,
                  patience=None)
    assert result.stopped == "max_steps" and result.state.step == 8
    assert result.averaged_from == ["ckpt_00000004", "ckpt_00000006", "ckpt_00000008"]
    again = _run(tmp_path / "b", losses * 2, max_steps=8, validate_every=2, save_every=2, keep_last=3, average_last=3,
                 patience=None)
    assert again.averaged_from == ["ckpt_00000004", "ckpt_00000006", "ckpt_00000008"]  # not the best (step 2)
    avg = load_checkpoint(again.average).model
    parts = [load_checkpoint(tmp_path / "b" / "checkpoints" / n).model for n in again.averaged_from]
    for key in avg:
        torch.testing.assert_close(avg[key].double(), sum(p[key].double() for p in parts) / 3, rtol=1e-6, atol=1e-7)
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["status"] == "still improving"  # a budget is a cap
