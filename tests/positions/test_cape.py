"""CAPE (Likhomanenko et al. 2021, §4 Eq. 5-7, §5.3 translation)."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.positions.base import default_positions
from posenc.positions.cape import CapeAugmentation, CapeParams, mean_normalize

B, S, T = 2000, 7, 5


def padded(b: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded mask with lengths in [3, length] and its default positions."""
    lengths = torch.randint(3, length + 1, (b,))
    mask = torch.arange(length)[None] < lengths[:, None]
    return default_positions(mask), mask


def train(**kw) -> CapeAugmentation:
    return CapeAugmentation(CapeParams(**kw)).train()


def test_mean_normalize_by_hand() -> None:
    pos = torch.tensor([[0.0, 1, 2, 3, 4], [0, 1, 2, 3, 4]])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    expected = torch.tensor([[-1.0, 0, 1, 2, 3], [-2, -1, 0, 1, 2]])  # mean over real tokens only
    assert torch.equal(mean_normalize(pos, mask), expected)


def test_eval_is_mean_normalisation_only() -> None:
    pos, mask = padded(8, S)
    aug = CapeAugmentation(CapeParams(max_global_shift=5, max_local_shift=0.5, max_global_scaling=2)).eval()
    assert torch.equal(aug(pos, mask), mean_normalize(pos, mask))
    plain = CapeAugmentation(CapeParams(mean_normalize=False)).eval()
    assert torch.equal(plain(pos, mask), pos)


def test_global_shift_is_shared_and_bounded() -> None:
    pos, mask = padded(B, S)
    out = train(max_global_shift=2.0, max_local_shift=0.0, max_global_scaling=1.0)(pos, mask)
    shift = out - mean_normalize(pos, mask)
    assert torch.allclose(shift, shift[:, :1].expand_as(shift), atol=1e-6)  # one Δ per sequence
    delta = shift[:, 0]
    assert delta.abs().max() <= 2.0
    assert delta.min() < -1.8 and delta.max() > 1.8  # fills U(−Δmax, Δmax)
    assert delta.mean().abs() < 0.1


def test_local_shifts_are_bounded_and_per_token() -> None:
    pos, mask = padded(B, S)
    out = train(max_global_shift=0.0, max_local_shift=0.5, max_global_scaling=1.0)(pos, mask)
    eps = out - mean_normalize(pos, mask)
    assert eps.abs().max() <= 0.5
    assert eps.min() < -0.45 and eps.max() > 0.45
    assert eps.std(dim=1).min() > 0.01  # a different ε_i for every token of a row
    # token order survives εmax = 0.5 (CAPE §5.3 MT setting)
    assert torch.all(out[:, 1:] > out[:, :-1])


def test_global_scaling_is_log_uniform_and_bounded() -> None:
    lam_max = 2.0
    pos, mask = padded(B, S)
    base = mean_normalize(pos, mask)
    out = train(max_global_shift=0.0, max_local_shift=0.0, max_global_scaling=lam_max)(pos, mask)
    # last minus first real-or-padded position: scale of the row (positions are affine in the index)
    lam = (out[:, -1] - out[:, 0]) / (base[:, -1] - base[:, 0])
    torch.testing.assert_close(out, base * lam[:, None], atol=1e-5, rtol=0)
    assert lam.min() >= 1 / lam_max - 1e-6 and lam.max() <= lam_max + 1e-6
    log_lam = lam.log()
    assert log_lam.min() < -0.9 * math.log(lam_max) and log_lam.max() > 0.9 * math.log(lam_max)
    assert log_lam.mean().abs() < 0.05  # log λ ~ U(−log λmax, log λmax) is centred


def test_order_is_shift_then_scale() -> None:
    """p' = λ(p + Δ): recovering Δ from the output keeps |Δ| ≤ Δmax (scale-then-shift would not)."""
    pos, mask = padded(B, S)
    base = mean_normalize(pos, mask)
    out = train(max_global_shift=3.0, max_local_shift=0.0, max_global_scaling=3.0)(pos, mask)
    lam = out[:, 1] - out[:, 0]  # adjacent positions differ by 1 before scaling
    delta = out[:, 0] / lam - base[:, 0]
    torch.testing.assert_close(out, (base + delta[:, None]) * lam[:, None], atol=1e-4, rtol=0)
    assert delta.abs().max() <= 3.0 + 1e-4
    assert (delta.abs() * lam).max() > 3.5  # the scale multiplies the shift too


def test_pair_shares_global_shift_and_scale_and_scales_the_source() -> None:
    """§5.3: source × α; one Δ and λ per pair; target not mean-normalised (documented deviation)."""
    alpha = 1.5
    aug = train(max_global_shift=4.0, max_local_shift=0.0, max_global_scaling=2.0, source_scale=alpha)
    src_pos, src_mask = padded(B, S)
    tgt_pos, tgt_mask = padded(B, T)
    src_out, tgt_out = aug.pair(src_pos, src_mask, tgt_pos, tgt_mask)
    lam = tgt_out[:, 1] - tgt_out[:, 0]
    delta = tgt_out[:, 0] / lam  # target positions start at 0
    torch.testing.assert_close(tgt_out, (tgt_pos + delta[:, None]) * lam[:, None], atol=1e-4, rtol=0)
    expected_src = (mean_normalize(src_pos * alpha, src_mask) + delta[:, None]) * lam[:, None]
    torch.testing.assert_close(src_out, expected_src, atol=1e-4, rtol=0)
    assert len(set(lam.round(decimals=3).tolist())) > 100  # but different across pairs


def test_pair_local_shifts_are_independent_per_side() -> None:
    aug = train(max_global_shift=0.0, max_local_shift=0.5, max_global_scaling=1.0, mean_normalize=False)
    pos, mask = padded(B, S)
    src_out, tgt_out = aug.pair(pos, mask, pos.clone(), mask)
    src_eps, tgt_eps = src_out - pos, tgt_out - pos
    assert src_eps.abs().max() <= 0.5 and tgt_eps.abs().max() <= 0.5
    corr = torch.corrcoef(torch.stack((src_eps.flatten(), tgt_eps.flatten())))[0, 1]
    assert corr.abs() < 0.05


@pytest.mark.parametrize("normalize", [True, False])
def test_pair_in_eval(normalize: bool) -> None:
    alpha = 0.8
    aug = CapeAugmentation(CapeParams(source_scale=alpha, mean_normalize=normalize)).eval()
    src_pos, src_mask = padded(6, S)
    tgt_pos, tgt_mask = padded(6, T)
    src_out, tgt_out = aug.pair(src_pos, src_mask, tgt_pos, tgt_mask)
    expected = src_pos * alpha
    if normalize:
        expected = mean_normalize(expected, src_mask)
    assert torch.equal(src_out, expected)
    assert torch.equal(tgt_out, tgt_pos)
    step = torch.full((6, 1), 4.0)
    assert torch.equal(aug.eval_target(step), step)


def test_data_needs_are_resolved_from_the_config_not_the_model() -> None:
    from posenc.positions import PositionConfig
    from posenc.positions.cape import CapeParams as Params

    assert PositionConfig(name="cape").needs_source_bos
    assert not PositionConfig(name="cape", cape=Params(source_bos=False, source_scale=1.2)).needs_source_bos
    for name in ("ape", "shape", "rpe", "rope", "alibi"):  # inactive cape block is ignored
        assert not PositionConfig(name=name).needs_source_bos
