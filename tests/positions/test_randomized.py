"""Randomized positional encodings (Ruoss et al. 2023): sorted distinct subsets of {0..N−1}, in
training and, as published, at evaluation (seeded); ``eval: sequential`` keeps 0..L−1."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import torch

from posenc.config import from_dict
from posenc.decoding.search import beam_search, greedy_search
from posenc.errors import ConfigError, DataError
from posenc.models.lm import DecoderLM, LMConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions import PositionConfig, build_augmentation, default_positions, resolve
from posenc.positions.learned import LearnedParams
from posenc.positions.randomized import RandomizedParams
from tests.conftest import tiny_config


def augmentation(max_len: int, **params) -> torch.nn.Module:
    return build_augmentation(PositionConfig(name="ape+randomized", randomized=RandomizedParams(max_len, **params)))


def reference_rule(n: int, length: int, rng: np.random.Generator) -> tuple[int, ...]:
    """The reference code's rule (Ruoss et al. 2023, ``noisy_fixed_positional_encodings``): choose
    ``length`` of arange(n) without replacement, then sort (position 0 is a candidate)."""
    return tuple(int(p) for p in np.sort(rng.choice(np.arange(n), size=length, replace=False)))


def test_training_positions_are_sorted_distinct_and_in_range() -> None:
    aug, mask = augmentation(12).train(), torch.ones(64, 10, dtype=torch.bool)
    pos = aug(default_positions(mask), mask)
    assert pos.shape == (64, 10) and (pos[:, 1:] > pos[:, :-1]).all()  # strictly increasing
    assert pos.min() >= 0 and pos.max() <= 11 and torch.equal(pos, pos.round())
    assert not torch.equal(pos, default_positions(mask))  # 64 draws: identity has tiny probability


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_draws_follow_the_reference_distribution(mode: str) -> None:
    """Every sorted 3-subset of {0..5} is equally likely, as under the reference rule (the training
    sampler and the seeded eval sampler alike); chi-square over the 20 subsets, and the same counts
    from a direct reimplementation of the reference rule."""
    n, length, draws = 6, 3, 6000
    aug, mask = augmentation(n), torch.ones(draws, length, dtype=torch.bool)
    torch.manual_seed(0)
    pos = (aug.train() if mode == "train" else aug.eval())(default_positions(mask), mask)
    ours = Counter(tuple(int(p) for p in row) for row in pos)
    rng = np.random.default_rng(0)
    ref = Counter(reference_rule(n, length, rng) for _ in range(draws))
    subsets = list(itertools.combinations(range(n), length))
    assert set(ours) == set(ref) == set(subsets)  # position 0 and N−1 included, as in the reference
    expected = draws / len(subsets)
    for counts in (ours, ref):  # chi-square, 19 dof: p = 0.001 at 43.8
        assert sum((counts[s] - expected) ** 2 / expected for s in subsets) < 43.8


def test_padded_rows_get_a_uniform_subset_of_their_own_length() -> None:
    """A row of length 1 in a batch of width 4 draws from all of {0..N−1} (mean (N−1)/2), not the
    smallest order statistic of a width-4 draw; pads keep their default positions."""
    n, rows = 20, 4000
    mask = torch.zeros(rows, 4, dtype=torch.bool)
    mask[:, :1] = True
    torch.manual_seed(1)
    pos = augmentation(n).train()(default_positions(mask), mask)
    assert abs(pos[:, 0].mean().item() - (n - 1) / 2) < 0.5
    assert torch.equal(pos[:, 1:], default_positions(mask)[:, 1:])
    left = torch.zeros(2, 5, dtype=torch.bool)
    left[:, 2:] = True  # left padding: the drawn positions go to the real tokens, in order
    pos = augmentation(8).eval()(default_positions(left), left)
    assert (pos[:, 2:].diff() > 0).all() and pos.max() < 8 and torch.equal(pos[:, :2], default_positions(left)[:, :2])


def test_eval_samples_by_default_reproducibly_without_touching_the_global_rng() -> None:
    mask = torch.ones(8, 10, dtype=torch.bool)
    rng_before = torch.get_rng_state()
    first = augmentation(200).eval()(default_positions(mask), mask)
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert not torch.equal(first, default_positions(mask)) and (first[:, 1:] > first[:, :-1]).all()
    assert torch.equal(first, augmentation(200).eval()(default_positions(mask), mask))  # a fresh instance
    aug = augmentation(200).eval()
    aug(default_positions(mask), mask)
    aug.train().eval()  # every evaluation restarts the eval stream
    assert torch.equal(first, aug(default_positions(mask), mask))
    other = augmentation(200, eval_seed=7).eval()(default_positions(mask), mask)
    assert not torch.equal(first, other)


def test_sequential_eval_is_the_identity_and_full_range_is_the_identity() -> None:
    mask = torch.ones(3, 5, dtype=torch.bool)
    assert torch.equal(augmentation(5).train()(default_positions(mask), mask), default_positions(mask))
    aug = augmentation(100, eval="sequential").eval()
    assert torch.equal(aug(default_positions(mask), mask), default_positions(mask))
    assert torch.equal(aug.eval_target(torch.full((3, 1), 7.0)), torch.full((3, 1), 7.0))
    assert torch.equal(aug.decode_positions(4, "cpu"), torch.arange(4.0)[None])


def test_decode_positions_are_one_sorted_draw_continuing_past_n() -> None:
    aug = augmentation(30).eval()
    a = aug.decode_positions(8, "cpu")
    assert a.shape == (1, 8) and (a[:, 1:] > a[:, :-1]).all() and a.max() < 30
    assert torch.equal(a, augmentation(30).eval().decode_positions(8, "cpu"))
    long = augmentation(5).eval().decode_positions(7, "cpu")
    assert torch.equal(long, torch.tensor([[0.0, 1, 2, 3, 4, 5, 6]]))


def test_seeded_training_draws_repeat() -> None:
    aug, mask = augmentation(50).train(), torch.ones(4, 6, dtype=torch.bool)
    torch.manual_seed(3)
    a = aug(default_positions(mask), mask)
    torch.manual_seed(3)
    assert torch.equal(a, aug(default_positions(mask), mask))


def test_bad_options_too_long_sequences_and_bad_combinations_are_one_line_errors() -> None:
    mask = torch.ones(1, 9, dtype=torch.bool)
    with pytest.raises(DataError, match="randomized.max_len 8"):
        augmentation(8).train()(default_positions(mask), mask)
    with pytest.raises(DataError, match="randomized.max_len 8"):
        augmentation(8).eval()(default_positions(mask), mask)
    with pytest.raises(ConfigError, match="randomized.eval must be one of sample, sequential"):
        RandomizedParams(eval="off")
    for ok in ("rope+randomized", "rpe+randomized", "alibi+randomized", "t5+randomized"):
        assert resolve(ok).augment == "randomized"
    for bad in ("rnn+randomized", "nopos+randomized"):
        with pytest.raises(ConfigError, match="needs input method"):
            resolve(bad)


def test_learned_table_smaller_than_max_len_is_rejected_at_config_time() -> None:
    """Defaults (1,024 rows, positions up to 2,047) used to fail on every training step."""
    with pytest.raises(ConfigError, match="randomized draws positions up to 2047 but learned has 1024"):
        PositionConfig(name="learned+randomized")
    with pytest.raises(ConfigError, match="lower model.position.randomized.max_len to <= 1024"):
        PositionConfig(name="learned+randomized", randomized=RandomizedParams(1025))
    PositionConfig(name="learned+randomized", randomized=RandomizedParams(1024))
    PositionConfig(name="learned+randomized", learned=LearnedParams(max_positions=2048))
    PositionConfig(name="learned+randomized", learned=LearnedParams(max_positions=16, wrap=True))
    with pytest.raises(ConfigError, match="up to 99 but learned has 50"):  # through the YAML/dict path
        from_dict(LMConfig, {"vocab_size": 5, "position": {"name": "learned+randomized", "learned": {"max_positions": 50},
                                                           "randomized": {"max_len": 100}}})


def lm(**randomized) -> DecoderLM:
    cfg = from_dict(LMConfig, {"layers": 1, "d_model": 16, "heads": 2, "d_ff": 32, "vocab_size": 20,
                               "position": {"name": "ape+randomized", "randomized": {"max_len": 64, **randomized}}})
    torch.manual_seed(0)
    return DecoderLM(cfg).eval()


def test_lm_eval_uses_sampled_positions_and_is_reproducible() -> None:
    """The lengthgen evaluation (teacher-forced full pass in eval mode) sees sampled positions."""
    tokens, mask = torch.randint(1, 20, (4, 12)), torch.ones(4, 12, dtype=torch.bool)
    sampled, sequential = lm(), lm(eval="sequential")
    with torch.no_grad():
        a, b = sampled(tokens, mask), sampled.train().eval()(tokens, mask)
        c = sequential(tokens, mask)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(a, c, atol=1e-4)


def test_lm_incremental_decoding_reads_one_draw_of_its_horizon() -> None:
    model, tokens = lm(), torch.randint(1, 20, (2, 5))
    with torch.no_grad():
        with pytest.raises(ConfigError, match="decoding horizon"):
            model.step(tokens[:, 0], model.init_state(2))
        state = model.init_state(2, horizon=5)
        for t in range(5):
            model.step(tokens[:, t], state)
    expected = model.train().eval().augment.decode_positions(5, "cpu").expand(2, 5)
    assert torch.equal(state.steps.positions, expected)


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_translation_decoding_uses_sampled_positions_reproducibly(search) -> None:
    torch.manual_seed(0)
    cfg = tiny_config("ape+randomized", vocab=30, position_params={"randomized": {"max_len": 256}})
    model = Seq2SeqTransformer(cfg, pad_id=0).eval()
    src = torch.randint(3, 30, (3, 7))
    mask = torch.ones_like(src, dtype=torch.bool)
    with torch.no_grad():
        first = search(model, src, mask, 1, 2, max_len_b=6)
        again = search(model.train().eval(), src, mask, 1, 2, max_len_b=6)
        state = model.train().eval().init_static_state(model.encode(src, mask), mask, 6)
    table = state.steps.decode_positions.value
    assert first == again and table.shape == (1, 6) and not torch.equal(table, torch.arange(6.0)[None])


@pytest.mark.parametrize("bad", [{"max_len": 10**30}, {"max_len": 2.5}, {"max_len": True}, {"eval_seed": -1}])
def test_out_of_range_options_fail_at_construction(bad: dict) -> None:
    with pytest.raises(ConfigError, match=f"randomized.{next(iter(bad))}"):
        RandomizedParams(**bad)


def test_lm_eval_draws_each_padded_row_over_its_own_length() -> None:
    """A right-padded row of one real token (lengthgen outputs vary in length) gets a uniform
    position in {0..N−1} (mean 31.5 for N = 64), not the smallest of a width-10 draw (mean ≈ 5)."""
    model = lm()
    mask = torch.zeros(2000, 10, dtype=torch.bool)
    mask[:, 0] = True
    pos = model.positions(default_positions(mask), mask)
    assert abs(pos[:, 0].mean().item() - 31.5) < 2.0


def test_padding_columns_past_max_len_draw_the_same_positions() -> None:
    """A batch padded past ``max_len`` (bucketed for a captured step) whose real rows fit draws the
    same positions for its real tokens as the unpadded batch under the same seed; a real row longer
    than ``max_len`` is still one DataError."""
    aug = augmentation(10).train()
    lengths = torch.tensor([7, 10, 3])
    mask = torch.arange(10)[None, :] < lengths[:, None]
    wide = torch.cat([mask, torch.zeros(3, 6, dtype=torch.bool)], dim=1)  # 16 columns > max_len 10
    torch.manual_seed(5)
    narrow_pos = aug(default_positions(mask), mask)
    torch.manual_seed(5)
    wide_pos = aug(default_positions(wide), wide)
    assert torch.equal(wide_pos[:, :10][mask], narrow_pos[mask])
    with pytest.raises(DataError, match="sequence length 11 exceeds randomized.max_len 10"):
        long_row = torch.arange(16)[None, :] < 11
        aug(default_positions(long_row), long_row)
