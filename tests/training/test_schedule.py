import math

import pytest
import torch

from posenc.training import noam_factor, noam_lr, noam_scheduler


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
