"""FIRE (Li et al. 2023): the bias by hand, the MLP over distinct inputs only, gradients to c and L,
causal only, KV cache = full pass (also randomized and per layer)."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.config import from_dict
from posenc.errors import ConfigError
from posenc.positions import PositionConfig, build_attention
from tests.helpers.lm import assert_incremental_equals_full_pass, tiny_lm


def fire_with_known_weights() -> torch.nn.Module:
    """One head; c = 1, L = 4; f(u) = 2·relu(u) + 3·relu(0.5 − u)."""
    cfg = from_dict(PositionConfig, {"name": "fire", "fire": {"hidden": 2, "init_c": 1.0, "init_threshold": 4.0}})
    fire = build_attention(cfg, d_model=4, num_layers=1, num_heads=1, causal=True)
    mlp = fire.hook(0).mlp
    with torch.no_grad():
        mlp[0].weight.copy_(torch.tensor([[1.0], [-1.0]]))
        mlp[0].bias.copy_(torch.tensor([0.0, 0.5]))
        mlp[2].weight.copy_(torch.tensor([[2.0, 3.0]]))
        mlp[2].bias.zero_()
    return fire


@pytest.mark.parametrize("i,j,want", [
    (6, 2, 2 * math.log(5) / math.log(7)),  # i > L: ψ(4)/ψ(6) = ln 5 / ln 7
    (3, 1, 2 * math.log(3) / math.log(5)),  # i ≤ L: ψ(2)/ψ(max(4, 3)) = ln 3 / ln 5
    (2, 2, 3 * 0.5),  # distance 0: u = 0
    (9, 0, 2.0),  # ψ(9)/ψ(9) = 1
])
def test_bias_by_hand(i: int, j: int, want: float) -> None:
    fire = fire_with_known_weights()
    pos = torch.arange(10.0)[None]
    bias = fire.hook(0).bias(fire.context(pos, pos))  # (1, 1, 10, 10)
    assert float(bias[0, 0, i, j]) == pytest.approx(want, rel=1e-6)


def test_mlp_runs_over_distinct_inputs_only_and_learns_c_and_threshold() -> None:
    fire = fire_with_known_weights()
    seen: list[tuple[int, ...]] = []
    fire.hook(0).mlp.register_forward_hook(lambda m, args, out: seen.append(tuple(args[0].shape)))
    pos = torch.arange(10.0)[None].expand(3, 10)
    bias = fire.hook(0).bias(fire.context(pos, pos))
    # queries 0..4 (≤ L) share ψ(L): distances 0..4; queries 5..9 each have distances 0..i → 5 + 6+7+8+9+10
    assert seen == [(45, 1)] and bias.shape == (3, 1, 10, 10)
    bias[:, :, torch.arange(10)[:, None] >= torch.arange(10)[None, :]].sum().backward()
    assert float(fire.hook(0).c.grad.abs()) > 0 and float(fire.hook(0).threshold.grad.abs()) > 0


def test_bidirectional_stacks_are_refused() -> None:
    with pytest.raises(ConfigError, match="fire is causal only"):
        build_attention(PositionConfig(name="fire"), d_model=16, num_layers=1, num_heads=2, causal=False)


def test_per_layer_tables() -> None:
    shared = build_attention(PositionConfig(name="fire"), d_model=16, num_layers=3, num_heads=2, causal=True)
    cfg = from_dict(PositionConfig, {"name": "fire", "fire": {"per_layer": True}})
    per_layer = build_attention(cfg, d_model=16, num_layers=3, num_heads=2, causal=True)
    assert shared.hook(0) is shared.hook(2) and per_layer.hook(0) is not per_layer.hook(2)
    assert sum(p.numel() for p in shared.parameters()) == (32 + 32) + (32 * 2 + 2) + 2  # f_θ, c, L


@pytest.mark.parametrize("extra", [{"init_threshold": 4.0}, {"init_threshold": 4.0, "per_layer": True}],
                         ids=["threshold-4", "per-layer"])
def test_incremental_equals_full_pass(extra: dict) -> None:
    """Options that change the path (queries beyond L, one f_θ per layer); the defaults and
    fire+randomized are in tests/models/test_lm.py with every registered method."""
    assert_incremental_equals_full_pass(tiny_lm({"name": "fire", "fire": extra}))


def test_unique_small_equals_torch_unique() -> None:
    """The sort-free distinct keys: the same sorted keys and inverse as torch.unique, on the keys
    FIRE builds (queries beyond L get their own block) and on arbitrary small integers."""
    from posenc.positions.fire import FireParams, FirePosition, unique_small

    gen = torch.Generator().manual_seed(0)
    sparse = torch.tensor([[0, 10**9], [7, 0]])  # a maximum far above numel: the sort path
    for keys in (torch.randint(0, 50, (3, 7, 5), generator=gen), torch.tensor([4]), torch.zeros(0, dtype=torch.long), sparse):
        want, got = torch.unique(keys, return_inverse=True), unique_small(keys)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    fire = FirePosition(16, FireParams(init_threshold=6.0), num_layers=1, num_heads=2, causal=True)
    positions = torch.randint(0, 40, (4, 9), generator=gen).sort(dim=1).values.float()
    distance, query, index = fire.hook(0).distinct(fire.context(positions, positions))
    ctx = fire.context(positions, positions)
    beyond = torch.where(ctx.query > 6, ctx.query, -1)
    assert torch.equal(distance[index], ctx.distance) and torch.equal(query[index], beyond[:, :, None].expand_as(ctx.distance))


@pytest.mark.parametrize("name", ["fire", "t5"])
def test_a_shared_bias_hook_is_computed_once_per_stack_call(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 2 layers share one hook: its bias is computed once per forward (PositionContext.once),
    and the logits equal those of a bias recomputed in every layer."""
    from posenc.positions.base import PositionContext

    hook_type = type(build_attention(PositionConfig(name=name), d_model=32, num_layers=2, num_heads=4, causal=True).hook(0))
    calls, original = [], hook_type.bias
    monkeypatch.setattr(hook_type, "bias", lambda self, ctx: calls.append(1) or original(self, ctx))
    model, tokens = tiny_lm({"name": name}), torch.randint(1, 30, (2, 7))
    with torch.no_grad():
        once = model(tokens, torch.ones_like(tokens, dtype=torch.bool))
        assert len(calls) == 1
        monkeypatch.setattr(PositionContext, "once", lambda self, owner, make: make())
        every_layer = model(tokens, torch.ones_like(tokens, dtype=torch.bool))
    assert len(calls) == 3
    torch.testing.assert_close(once, every_layer)
