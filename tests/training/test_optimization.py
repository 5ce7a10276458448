"""Optimization (training/optimization.py): the learning-rate schedules (Noam, cosine, constant)
by hand and through the scheduler, and the number of updates a run makes."""

import math

import pytest
import torch

from posenc.errors import ConfigError
from posenc.training import TrainConfig, build_scheduler, cosine_factor, noam_factor, noam_lr, noam_scheduler
from posenc.training.optimization import cosine_scheduler, total_updates


def test_noam_values_by_hand() -> None:
    # d_model 512, warmup 4000: peak at step 4000 is 512^-0.5 · 4000^-0.5.
    assert noam_lr(4000, 512, 4000) == pytest.approx(1 / math.sqrt(512) / math.sqrt(4000), rel=1e-12)
    # warm-up branch: step · warmup^-1.5
    assert noam_lr(1, 512, 4000) == pytest.approx(512**-0.5 * 1 / 4000**1.5, rel=1e-12)
    assert noam_lr(100, 64, 10, scale=2.0) == pytest.approx(2.0 * 0.125 * 0.1, rel=1e-12)
    # d_model 64 → 0.125; step 5 < warmup 10: 5 / 10^1.5
    assert noam_factor(5, 64, 10) == pytest.approx(0.125 * 5 / 10**1.5, rel=1e-12)
    assert noam_factor(0, 64, 10) == 0.0


def test_noam_rises_then_decays() -> None:
    values = [noam_lr(s, 256, 50) for s in range(1, 200)]
    peak = max(range(len(values)), key=values.__getitem__) + 1
    assert peak == 50
    assert all(a < b for a, b in zip(values[:49], values[1:50]))
    assert all(a > b for a, b in zip(values[49:], values[50:]))


def test_scheduler_lr_of_each_update() -> None:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=2.0)
    sched = noam_scheduler(opt, d_model=64, warmup=3)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([noam_lr(n, 64, 3, scale=2.0) for n in range(1, 7)], rel=1e-12)


def _lrs(sched: torch.optim.lr_scheduler.LambdaLR, updates: int) -> list[float]:
    opt, seen = sched.optimizer, []
    for _ in range(updates):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return seen


def _optimizer(lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=lr)


def test_cosine_values_by_hand() -> None:
    # warmup 2 of 6 updates, floor 0: 1/2, 1, then ½(1 + cos(π·k/4)) for k = 0..3.
    seen = _lrs(cosine_scheduler(_optimizer(1.0), total=6, warmup=2), 6)
    expected = [0.5, 1.0] + [0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(4)]
    assert seen == pytest.approx(expected, rel=1e-12)
    assert cosine_factor(100, total=6, warmup=2) == pytest.approx(0.0, abs=1e-12)  # clipped after the end


def test_cosine_floor_is_the_speech_recipe() -> None:
    # CAPE §5.2 CTC recipe of the former speech loop: lr·(0.05 + 0.95·½(1 + cos(π·frac))).
    lr, warmup, steps = 1e-3, 3, 10
    seen = _lrs(cosine_scheduler(_optimizer(lr), total=steps, warmup=warmup, floor=0.05), steps)
    expected = [lr * (s + 1) / warmup if s < warmup else
                lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup)))) for s in range(steps)]
    assert seen == pytest.approx(expected, rel=1e-12)


def test_build_scheduler_by_name() -> None:
    cos = build_scheduler(_optimizer(1.0), TrainConfig(schedule="cosine", warmup_fraction=0.25, max_steps=8), None, 8)
    assert _lrs(cos, 3) == pytest.approx([0.5, 1.0, 1.0], rel=1e-12)  # warmup = int(0.25 · 8) = 2
    noam = build_scheduler(torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=2.0), TrainConfig(warmup=3), 64, 0)
    assert _lrs(noam, 2) == pytest.approx([noam_lr(1, 64, 3, 2.0), noam_lr(2, 64, 3, 2.0)], rel=1e-12)
    with pytest.raises(ConfigError, match="d_model"):
        build_scheduler(_optimizer(1.0), TrainConfig(), None, 0)
    with pytest.raises(ConfigError, match="train.schedule"):
        TrainConfig(schedule="linear")


def test_total_updates_of_an_epoch_limited_run() -> None:
    cos = dict(schedule="cosine", max_steps=0, max_epochs=3, update_freq=2)
    assert total_updates(TrainConfig(**cos), lambda: 7) == 12  # ⌈7 / 2⌉ updates per epoch × 3
    assert total_updates(TrainConfig(**{**cos, "max_steps": 10}), lambda: 7) == 10  # the smaller limit
    assert total_updates(TrainConfig(schedule="noam", max_steps=0, max_epochs=3), lambda: 1 / 0) == 0  # not needed


def test_constant_schedule_holds_the_peak_after_warmup() -> None:
    """``constant``: linear warm-up over ``warmup`` updates, then the lr itself, whatever the total."""
    const = build_scheduler(_optimizer(1e-3), TrainConfig(schedule="constant", warmup=4, max_steps=6), None, 6)
    assert _lrs(const, 7) == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3, 1e-3], rel=1e-12)
    flat = build_scheduler(_optimizer(1e-3), TrainConfig(schedule="constant", warmup=1), None, 0)
    assert _lrs(flat, 3) == pytest.approx([1e-3] * 3, rel=1e-12)
