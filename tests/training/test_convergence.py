"""The one convergence rule: converged = stopped by patience with the best validation
after warm-up; a capped run is never converged; no stop record = "unknown", never converged."""

from __future__ import annotations

import json
from pathlib import Path

from posenc.training.config import TrainConfig
from posenc.training.convergence import (
    CONVERGED,
    IMPROVING,
    NO_CURVE,
    NOT_FLAT,
    UNKNOWN,
    WARMUP,
    best_validation,
    convergence,
    status,
    status_of,
    warmup_updates,
)
from posenc.training.state import TrainState
from posenc.training.stopping import (
    LOSS_FLOOR,
    SPREAD_FLOOR,
    below_floor,
    end_slope,
    flat_t,
    is_flat,
    record_validation,
)
from tests.helpers.training import HandValidLoss, batch_of, batches_fn, random_pairs, tiny_model, train, train_config

TRAIN = batches_fn(random_pairs(40, seed=2), max_tokens=48)
VALID = [batch_of(random_pairs(4, seed=9))]




def _run(out: Path, losses: list[float], **cfg):  # noqa: ANN202
    base = dict(max_steps=len(losses), validate_every=1, save_every=0, warmup=1)
    return train(tiny_model(), TRAIN, train_config(**{**base, **cfg}), out, valid_batches=VALID,
                 loss_fn=HandValidLoss(losses))


def test_status_rule_by_hand() -> None:
    assert status("patience", best_step=300, warmup=200, flat=True) == CONVERGED
    assert status("patience", best_step=300, warmup=200) == NO_CURVE  # flatness not tested: never converged
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
    slope, se = end_slope([[100, 3.0], [200, 2.0], [300, 2.5], [400, 2.0]])
    assert out == {"stopped": "patience", "warmup": 150, "best_step": 200, "best_valid": 2.0, "last_valid": 2.0,
                   "max_steps": None, "valid_slope": slope, "valid_slope_se": se, "flat": True,
                   "status": CONVERGED, "converged": True}
    assert best_validation([]) == (None, None)
    assert convergence([], "max_steps", 10)["best_step"] is None


def test_status_of_old_summaries_is_unknown_never_converged() -> None:
    assert status_of({"converged": True, "status": "converged"}) == UNKNOWN  # old rule's flags are not trusted
    assert status_of({"stopped": "patience", "best_valid": 1.0}) == UNKNOWN  # no best step / warm-up recorded
    assert status_of(None) == UNKNOWN
    assert status_of({"stopped": "patience", "best_step": 900, "warmup": 200}) == NO_CURVE  # no curve, no flat
    assert status_of({"stopped": "patience", "best_step": 900, "warmup": 200, "flat": True}) == CONVERGED
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
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert result.stopped == summary["stopped"] == "max_steps"
    assert summary["status"] == IMPROVING and summary["converged"] is False
    assert summary["warmup"] == 1 and summary["best_step"] == 2


def test_patience_stop_after_warmup_is_converged(tmp_path: Path) -> None:
    result = _run(tmp_path, [3.0, 2.0, 2.5, 2.4, 1.0, 1.0], patience=2, warmup=1)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert result.stopped == summary["stopped"] == "patience" and result.state.step == 4
    assert summary["best_step"] == 2 and summary["status"] == CONVERGED and summary["converged"] is True


def test_patience_stop_with_best_in_warmup_is_not_converged(tmp_path: Path) -> None:
    _run(tmp_path, [1.0, 2.0, 2.5, 3.0, 3.0, 3.0], patience=3, warmup=3)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped"] == "patience" and summary["best_step"] == 1
    assert summary["status"] == WARMUP and summary["converged"] is False


def test_patience_at_the_cap_step_is_capped(tmp_path: Path) -> None:
    """Patience running out at the very step the cap is reached: the run used its whole budget, so
    it is capped ("still improving"), never converged (the trainer let patience win)."""
    result = _run(tmp_path, [3.0, 2.0, 2.5, 2.5], patience=2)
    assert result.state.bad_validations == 2  # patience did run out at step 4 = max_steps
    assert result.stopped == "max_steps" and result.summary()["status"] == IMPROVING
    assert result.summary()["max_steps"] == 4


def test_summary_recorded_as_patience_at_the_cap_reads_capped() -> None:
    """Summaries written by the older trainer (patience won at the cap step): the recorded steps
    against the cap decide; the cap comes from the summary or, for older ones, from the caller."""
    old = {"stopped": "patience", "best_step": 20000, "warmup": 100, "steps": 20000, "status": "converged", "flat": True}
    assert status_of(old) == CONVERGED  # the cap unknown: the old reading
    assert status_of(old, cap=20000) == IMPROVING
    assert status_of({**old, "max_steps": 20000}) == IMPROVING
    assert status_of({**old, "steps": 19800}, cap=20000) == CONVERGED
    assert status("patience", 300, 200, steps=8000, cap=8000) == IMPROVING
    assert status("patience", 300, 200, steps=8000, cap=0, flat=True) == CONVERGED  # 0 = no step cap


def test_end_slope_is_the_least_squares_line() -> None:
    # loss = 3 - 0.002 * step exactly: slope -2 nats per 1,000 updates, no residual
    line = [[s, 3.0 - 0.002 * s] for s in range(100, 1100, 100)]
    slope, se = end_slope(line)
    assert abs(slope + 2.0) < 1e-9 and se < 1e-9
    assert is_flat(line) is False
    assert end_slope(line[:2]) is None and is_flat(line[:2]) is None
    # only the last 8 validations count: a fall before them does not make the end sloped
    plateau = [[100, 9.0], [200, 5.0]] + [[s, 2.0 + (0.01 if s % 200 else -0.01)] for s in range(300, 1100, 100)]
    assert is_flat(plateau) is True


def test_noise_around_a_plateau_is_flat_and_a_noisy_fall_is_not() -> None:
    """The multi30k_cpu scale: validations 200 updates apart, noise +-0.01 nats (measured 0.007-0.021)."""
    noise = [0.01, -0.012, 0.004, -0.006, 0.011, -0.009, 0.002, -0.003]
    flat = [[200 * (i + 1), 2.72 + e] for i, e in enumerate(noise)]
    falling = [[200 * (i + 1), 2.80 - 0.02 * i / 1.0 * 0.5 + e] for i, e in enumerate(noise)]  # -0.05 nats / 1k
    assert is_flat(flat) is True and is_flat(falling) is False
    assert status("patience", 400, 100, flat=False) == NOT_FLAT
    assert status_of({"stopped": "patience", "best_step": 400, "warmup": 100, "steps": 1600}, history=falling) == NOT_FLAT
    assert status_of({"stopped": "patience", "best_step": 400, "warmup": 100, "steps": 1600}, history=flat) == CONVERGED


def _replay(losses: list[float], **cfg) -> int:  # noqa: ANN003
    """The step (validations 1, 2, ...) at which patience stops ``losses``; 0 = never."""
    state, config = TrainState(), TrainConfig(**{"patience": 4, "min_delta": 0.001, **cfg})
    for i, loss in enumerate(losses, start=1):
        state.step = i
        if record_validation(state, loss, config):
            return i
    return 0


def test_defaults_reproduce_the_raw_rule() -> None:
    """smooth_window 1 and require_flat False: best and patience on the raw losses, as before."""
    losses = [3.0, 2.9, 2.95, 2.93, 2.91, 2.905, 2.9]
    assert _replay(losses) == 6 == _replay(losses, smooth_window=1, require_flat=False)


NOISE = [0.01, -0.012, 0.004, -0.006, 0.011, -0.009, 0.002, -0.003] * 4  # +-0.01 nats (multi30k_cpu: 0.007-0.021)


def _lucky_fall() -> list[float]:
    """-0.004 nats per validation for 16 validations, then flat; noise; one lucky validation (the 8th, -0.02)."""
    losses = [2.8 - 0.004 * min(i, 16) + NOISE[i] for i in range(32)]
    losses[7] -= 0.02
    return losses


def test_smoothed_patience_ignores_a_lucky_dip() -> None:
    """The raw rule stops 4 validations after the lucky one, while the curve still falls; the
    moving average of 4 (the dip moves it by a quarter) stops only after the fall has ended."""
    losses = _lucky_fall()
    assert _replay(losses) == 12
    assert _replay(losses, smooth_window=4) > 16


def test_require_flat_waits_for_the_curve_to_flatten() -> None:
    losses = _lucky_fall()
    stop_raw, stop_flat = _replay(losses), _replay(losses, require_flat=True)
    assert is_flat([[i + 1, v] for i, v in enumerate(losses[:stop_raw])]) is False  # the raw stop was on a slope
    assert stop_flat > stop_raw
    assert is_flat([[i + 1, v] for i, v in enumerate(losses[:stop_flat])]) is True


def _sloped(t: float, n: int = 8) -> list[list[float]]:
    """``n`` validations 100 updates apart whose least-squares slope is exactly ``t`` standard
    errors: a line plus residuals orthogonal to the constant and the step (+-0.01 nats)."""
    signs = [1, -1, -1, 1] * (n // 4)
    x = [100.0 * (i + 1) for i in range(n)]
    mx = sum(x) / n
    sxx = sum((v - mx) ** 2 for v in x)
    se = (sum((0.01 * e) ** 2 for e in signs) / (n - 2) / sxx) ** 0.5  # per update
    return [[v, 2.7 + t * se * (v - mx) + 0.01 * e] for v, e in zip(x, signs)]


def test_flatness_uses_the_exact_one_sided_critical_value() -> None:
    """The one-sided 5 % Student-t value for n - 2 degrees of freedom, not a rounded 2.0;
    two multi30k_select runs sat at t = -1.97/-1.98, flat by 2.0 and not flat by 1.943."""
    assert round(flat_t(8), 3) == 1.943 and round(flat_t(3), 3) == 6.314 and round(flat_t(30), 3) == 1.701
    slope, se = end_slope(_sloped(-1.97))
    assert abs(slope / se + 1.97) < 1e-9
    assert is_flat(_sloped(-1.97)) is False and is_flat(_sloped(-1.9)) is True
    assert is_flat(_sloped(-1.97)[:4]) is True  # 4 points: the critical value is 2.920
    assert status_of({"stopped": "patience", "best_step": 400, "warmup": 100}, history=_sloped(-1.97)) == NOT_FLAT


def test_absolute_floor_makes_a_solved_or_constant_curve_flat() -> None:
    """A solved task's loss halving from 4e-8 nats, and a noise-free line with a 7e-8 nat spread, fall
    significantly by the t test but are flat by the floor; a real noise-free fall is not."""
    solved = [[100 * (i + 1), 4e-8 * 0.5 ** i] for i in range(8)]
    still = [[100 * (i + 1), 2.0 - 1e-8 * i] for i in range(8)]
    for curve in (solved, still):
        slope, se = end_slope(curve)
        assert slope < -flat_t(8) * se  # "not flat" without the floor
    assert below_floor(solved) and below_floor(still) and is_flat(solved) is True and is_flat(still) is True
    falling = [[100 * (i + 1), 2.0 - 1e-3 * i] for i in range(8)]
    assert not below_floor(falling) and is_flat(falling) is False
    assert not below_floor([[1, LOSS_FLOOR * 2], [2, LOSS_FLOOR * 1.5]]) and below_floor([[1, LOSS_FLOOR], [2, LOSS_FLOOR / 2]])
    assert below_floor([[1, 3.0], [2, 3.0 - SPREAD_FLOOR / 2]]) and not below_floor([])
