"""The one convergence rule (issue 17): converged = stopped by patience with the best validation
after warm-up; a capped run is never converged; no stop record = "unknown", never converged."""

from __future__ import annotations

import json
from pathlib import Path

from posenc.training.convergence import (
    CONVERGED, IMPROVING, UNKNOWN, WARMUP, best_validation, convergence, status, status_of, warmup_updates,
)
from posenc.training.config import TrainConfig

from tests.helpers.training import HandValidLoss, train, batch_of, batches_fn, random_pairs, tiny_model, train_config

TRAIN = batches_fn(random_pairs(40, seed=2), max_tokens=48)
VALID = [batch_of(random_pairs(4, seed=9))]




def _run(out: Path, losses: list[float], **cfg):  # noqa: ANN202
    base = dict(max_steps=len(losses), validate_every=1, save_every=0, warmup=1)
    return train(tiny_model(), TRAIN, train_config(**{**base, **cfg}), out, valid_batches=VALID,
                 loss_fn=HandValidLoss(losses))


def test_status_rule_by_hand() -> None:
    assert status("patience", best_step=300, warmup=200) == CONVERGED
    assert status("patience", best_step=200, warmup=200) == WARMUP  # best inside warm-up: not a plateau
    assert status("patience", best_step=100, warmup=200) == WARMUP
    for cap in ("max_steps", "max_epochs"):  # a cap is never convergence, whatever the curve
        assert status(cap, best_step=5000, warmup=200) == IMPROVING
    assert status(None, 300, 200) == status("", 300, 200) == status("patience", None, 200) == UNKNOWN
    assert status("patience", 300, None) == UNKNOWN


def test_curves_the_old_rule_called_converged_are_not() -> None:
    """Issue 17: [10, 9, 8, 7, 6.5, 6.6] and a run improving 0.9 % per validation, both capped."""
    falling = [[i * 100, 10.0 * 0.991 ** i] for i in range(1, 11)]
    for history in ([[100 * (i + 1), v] for i, v in enumerate([10, 9, 8, 7, 6.5, 6.6])], falling):
        out = convergence(history, "max_steps", warmup=50)
        assert out["status"] == IMPROVING and out["converged"] is False


def test_convergence_keys() -> None:
    out = convergence([[100, 3.0], [200, 2.0], [300, 2.5], [400, 2.0]], "patience", warmup=150)
    assert out == {"stopped": "patience", "warmup": 150, "best_step": 200, "best_valid": 2.0, "last_valid": 2.0,
                   "status": CONVERGED, "converged": True}
    assert best_validation([]) == (None, None)
    assert convergence([], "max_steps", 10)["best_step"] is None


def test_status_of_old_summaries_is_unknown_never_converged() -> None:
    assert status_of({"converged": True, "status": "converged"}) == UNKNOWN  # old rule's flags are not trusted
    assert status_of({"stopped": "patience", "best_valid": 1.0}) == UNKNOWN  # no best step / warm-up recorded
    assert status_of(None) == UNKNOWN
    assert status_of({"stopped": "patience", "best_step": 900, "warmup": 200}) == CONVERGED
    assert status_of({"stopped": "max_steps", "best_step": 900, "warmup": 200, "status": "converged"}) == IMPROVING


def test_warmup_updates_follows_the_schedule() -> None:
    assert warmup_updates(TrainConfig(warmup=300), 1000) == 300
    assert warmup_updates(TrainConfig(schedule="cosine", warmup_fraction=0.1, warmup=7), 1000) == 100
    assert warmup_updates(TrainConfig(schedule="cosine", warmup=7), 1000) == 7


def test_min_delta_default_is_positive() -> None:
    assert TrainConfig().min_delta > 0


def test_capped_run_is_never_converged_and_records_why_it_stopped(tmp_path: Path) -> None:
    # flat after step 2, but patience (5) never ran out before the cap: still improving
    result = _run(tmp_path, [3.0, 2.0, 2.0, 2.0, 2.0], patience=5)
    summary = json.loads((tmp_path / "train_summary.json").read_text())
    assert result.stopped == summary["stopped"] == "max_steps"
    assert summary["status"] == IMPROVING and summary["converged"] is False
    assert summary["warmup"] == 1 and summary["best_step"] == 2


def test_patience_stop_after_warmup_is_converged(tmp_path: Path) -> None:
    result = _run(tmp_path, [3.0, 2.0, 2.5, 2.4, 1.0, 1.0], patience=2, warmup=1)
    summary = json.loads((tmp_path / "train_summary.json").read_text())
    assert result.stopped == summary["stopped"] == "patience" and result.state.step == 4
    assert summary["best_step"] == 2 and summary["status"] == CONVERGED and summary["converged"] is True


def test_patience_stop_with_best_in_warmup_is_not_converged(tmp_path: Path) -> None:
    _run(tmp_path, [1.0, 2.0, 2.5, 3.0, 3.0, 3.0], patience=3, warmup=3)
    summary = json.loads((tmp_path / "train_summary.json").read_text())
    assert summary["stopped"] == "patience" and summary["best_step"] == 1
    assert summary["status"] == WARMUP and summary["converged"] is False


def test_patience_at_the_cap_step_is_patience(tmp_path: Path) -> None:
    """Patience running out at the very step the cap is reached: the run did plateau."""
    result = _run(tmp_path, [3.0, 2.0, 2.5, 2.5], patience=2)
    assert result.stopped == "patience" and result.summary()["status"] == CONVERGED


def test_final_validation_never_relabels_a_capped_run(tmp_path: Path) -> None:
    """validate_every=2, cap 3: the end-of-run validation at step 3 exhausts patience=1, but the
    loop stopped because of the cap."""
    result = _run(tmp_path, [2.0, 3.0], patience=1, max_steps=3, validate_every=2)
    assert result.stopped == "max_steps" and result.summary()["status"] == IMPROVING


def test_resuming_a_run_stopped_by_patience_keeps_it_stopped(tmp_path: Path) -> None:
    """Raising the cap of a run that had plateaued (an experiment's "extend") must not train on."""
    first = _run(tmp_path, [3.0, 2.0, 2.5, 2.4], patience=2, save_every=1)
    assert first.stopped == "patience" and first.state.step == 4
    again = train(tiny_model(), TRAIN, train_config(max_steps=10, validate_every=1, save_every=1, warmup=1, patience=2),
                  tmp_path, valid_batches=VALID, loss_fn=HandValidLoss([9.0]))
    assert again.stopped == "patience" and again.state.step == 4
    assert json.loads((tmp_path / "train_summary.json").read_text())["status"] == CONVERGED
