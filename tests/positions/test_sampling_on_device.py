"""SHAPE and CAPE sampling: one on-device draw per call, exact composition, seeded, eval RNG-free, no host sync."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.positions.base import default_positions
from posenc.positions.cape import CapeAugmentation, CapeParams, mean_normalize
from posenc.positions.shape import ShapeAugmentation, ShapeParams
from tests.helpers.cuda import cuda_only

CUDA = cuda_only("host-sync detection needs CUDA")


def batch(b: int, s: int, t: int, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    src_mask = torch.arange(s, device=device)[None] < torch.randint(1, s + 1, (b, 1), device=device)
    tgt_mask = torch.arange(t, device=device)[None] < torch.randint(1, t + 1, (b, 1), device=device)
    return default_positions(src_mask), src_mask, default_positions(tgt_mask), tgt_mask


def test_cape_pair_is_eq_5_to_7_from_a_single_uniform_draw() -> None:
    p = CapeParams(max_global_shift=3.0, max_local_shift=0.4, max_global_scaling=2.5, source_scale=1.3)
    aug = CapeAugmentation(p).train()
    src_pos, src_mask, tgt_pos, tgt_mask = batch(5, 6, 4)
    torch.manual_seed(11)
    src_out, tgt_out = aug.pair(src_pos, src_mask, tgt_pos, tgt_mask)
    torch.manual_seed(11)
    u = torch.empty(5, 2 + 6 + 4).uniform_(-1, 1)  # the one draw: Δ, log λ, then ε of source and target
    delta, lam = 3.0 * u[:, :1], torch.exp(math.log(2.5) * u[:, 1:2])
    src = mean_normalize(src_pos * 1.3, src_mask)
    torch.testing.assert_close(src_out, lam * (src + delta + 0.4 * u[:, 2:8]), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(tgt_out, lam * (tgt_pos + delta + 0.4 * u[:, 8:]), atol=1e-6, rtol=1e-6)


def test_cape_and_shape_are_reproducible_under_a_seed_and_vary_without() -> None:
    src_pos, src_mask, tgt_pos, tgt_mask = batch(64, 7, 5)
    for aug in (CapeAugmentation(CapeParams(max_global_scaling=2.0)).train(), ShapeAugmentation(ShapeParams()).train()):
        torch.manual_seed(3)
        first = aug.pair(src_pos, src_mask, tgt_pos, tgt_mask)
        second = aug.pair(src_pos, src_mask, tgt_pos, tgt_mask)
        torch.manual_seed(3)
        again = aug.pair(src_pos, src_mask, tgt_pos, tgt_mask)
        assert all(torch.equal(a, b) for a, b in zip(first, again))
        assert not torch.equal(first[0], second[0]) and not torch.equal(first[1], second[1])


@pytest.mark.parametrize("aug", [
    CapeAugmentation(CapeParams(max_global_scaling=2.0, source_scale=0.7)),
    ShapeAugmentation(ShapeParams(max_shift=9, inference_offset=4)),
])
def test_eval_is_deterministic_and_draws_nothing(aug: torch.nn.Module) -> None:
    aug.eval()
    src_pos, src_mask, tgt_pos, tgt_mask = batch(8, 7, 5)
    state = torch.get_rng_state()
    outs = [aug.pair(src_pos, src_mask, tgt_pos, tgt_mask) for _ in range(2)]
    single = aug(src_pos, src_mask)
    assert torch.equal(torch.get_rng_state(), state)  # the generator was not advanced
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert torch.equal(aug.eval_target(tgt_pos), outs[0][1])  # the causal target transform agrees
    assert single.shape == src_pos.shape


def test_shape_pair_draws_integers_of_the_positions_dtype() -> None:
    aug = ShapeAugmentation(ShapeParams(max_shift=7)).train()
    src_pos, src_mask, tgt_pos, tgt_mask = batch(4000, 3, 2)
    src_out, tgt_out = aug.pair(src_pos, src_mask, tgt_pos, tgt_mask)
    k = torch.cat(((src_out - src_pos)[:, :1], (tgt_out - tgt_pos)[:, :1]), 1)
    assert src_out.dtype == torch.float32 and torch.equal(k, k.round())
    assert set(k.long().flatten().tolist()) == set(range(8))
    assert torch.equal(src_out - src_pos, (src_out - src_pos)[:, :1].expand(-1, 3))


def _gpu_train_step(aug: torch.nn.Module) -> None:
    torch.manual_seed(0)
    src_pos, src_mask, tgt_pos, tgt_mask = batch(32, 128, 128, "cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        src, tgt = aug.train().pair(src_pos, src_mask, tgt_pos, tgt_mask)
        single = aug(src_pos, src_mask)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert src.is_cuda and tgt.is_cuda and single.is_cuda and src.shape == (32, 128)


@CUDA
def test_cape_training_sampling_has_no_host_sync_on_cuda() -> None:
    _gpu_train_step(CapeAugmentation(CapeParams(max_global_scaling=2.0, source_scale=1.1)))


@CUDA
def test_shape_training_sampling_has_no_host_sync_on_cuda() -> None:
    _gpu_train_step(ShapeAugmentation(ShapeParams()))
