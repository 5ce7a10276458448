"""DecoderLM: incremental decoding with the KV cache equals the full causal pass, causality,
padding invariance, training-only augmentation."""

from __future__ import annotations

import pytest
import torch

from posenc.config import from_dict
from posenc.errors import ConfigError
from posenc.models.lm import DecoderLM, LMConfig
from tests.helpers.lm import assert_incremental_equals_full_pass
from tests.helpers.methods import params_for, sequence_methods

V, PAD = 30, 0


def lm(position: str, **params) -> DecoderLM:
    cfg = from_dict(LMConfig, {"layers": 2, "d_model": 32, "heads": 4, "d_ff": 64, "vocab_size": V,
                               "position": {"name": position, **params}})
    return DecoderLM(cfg, pad_id=PAD).eval()


#: Every 1-D method and augmentation pair of the registry (tests/helpers/methods.py).
METHODS = [(name, params_for(name)) for name in sequence_methods(causal=True)]


@pytest.mark.parametrize("name,params", METHODS, ids=[m for m, _ in METHODS])
def test_incremental_equals_full_pass(name: str, params: dict) -> None:
    assert_incremental_equals_full_pass(lm(name, **params))


@pytest.mark.parametrize("name,params", METHODS, ids=[m for m, _ in METHODS])
def test_causal_and_padding_invariant(name: str, params: dict) -> None:
    """Logits at t depend only on tokens ≤ t; right padding changes nothing at real tokens."""
    model = lm(name, **params)
    tokens = torch.randint(1, V, (2, 8))
    other = tokens.clone()
    other[:, 5:] = torch.randint(1, V, (2, 3))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    padded_mask = mask.clone()
    padded_mask[:, 5:] = False
    with torch.no_grad():
        a, b = model(tokens, mask), model(other, mask)
        c = model(other.masked_fill(~padded_mask, PAD), padded_mask)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    torch.testing.assert_close(a[:, :5], c[:, :5], rtol=1e-5, atol=1e-5)


def test_shape_is_random_in_training_only() -> None:
    ape, shape = lm("ape"), lm("shape", shape={"max_shift": 50})
    shape.load_state_dict(ape.state_dict(), strict=True)
    tokens = torch.randint(1, V, (4, 6))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    with torch.no_grad():
        assert torch.equal(shape(tokens, mask), ape(tokens, mask))  # SHAPE §2.3: k = 0 at inference
        shape.train()
        assert not torch.allclose(shape(tokens, mask), ape(tokens, mask))


def test_missing_vocabulary_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="vocab_size"):
        DecoderLM(LMConfig())


def test_init_state_without_horizon_is_refused_for_sampled_randomized_positions() -> None:
    model = lm("sinusoidal+randomized")  # eval: sample (the default, Ruoss et al. 2023)
    with pytest.raises(ConfigError, match="horizon=N"):
        model.init_state(2)
    state = model.init_state(2, horizon=3)
    assert model.step(torch.tensor([4, 5]), state).shape == (2, V)
    assert lm("sinusoidal+randomized", randomized={"eval": "sequential"}).init_state(2).steps.step == 0


@pytest.mark.parametrize("name", ["rope", "ape", "alibi", "fire"])
def test_incremental_equals_full_pass_with_given_position_ids(name: str) -> None:
    """Position coupling's ids (not 0..L−1: restarting per number, repeated) given to ``step`` one
    per token give the full pass's logits over the same ids; without them they would not."""
    torch.manual_seed(0)
    model = lm(name)
    tokens = torch.randint(1, V, (2, 8))
    ids = torch.tensor([[1, 2, 3, 0, 1, 2, 3, 0], [3, 2, 1, 0, 2, 1, 0, 0]])
    with torch.no_grad():
        full = model(tokens, torch.ones_like(tokens, dtype=torch.bool), ids)
        state = model.init_state(2)
        steps = torch.stack([model.step(tokens[:, t], state, ids[:, t]) for t in range(8)], 1)
        plain = model.init_state(2)
        default = torch.stack([model.step(tokens[:, t], plain) for t in range(8)], 1)
    torch.testing.assert_close(steps, full, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(default, full, atol=1e-3)
