"""Learned absolute embeddings, the GRU positional encoder (Neishi & Yoshinaga 2019 Eq. 8), no positions."""

from __future__ import annotations

import pytest
import torch

from posenc.errors import DataError
from posenc.positions.base import default_positions
from posenc.positions.gru import GRUParams, GRUPosition
from posenc.positions.learned import LearnedParams, LearnedPosition
from posenc.positions.none import NoParams, NoPosition

D = 8


def test_learned_adds_the_row_of_the_rounded_position() -> None:
    module = LearnedPosition(D, LearnedParams(max_positions=20))
    mask = torch.ones(2, 4, dtype=torch.bool)
    pos = torch.tensor([[0.0, 1, 2, 3], [5.2, 6.4, 6.6, 19]])
    x = torch.randn(2, 4, D)
    out = module(x, pos, mask)
    table = module.table.weight
    expected = x + torch.stack((table[[0, 1, 2, 3]], table[[5, 6, 7, 19]]))
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


@pytest.mark.parametrize("bad", [10.0, 12.0, -1.0])
def test_learned_out_of_range_is_a_data_error(bad: float) -> None:
    module = LearnedPosition(D, LearnedParams(max_positions=10))
    mask = torch.ones(1, 3, dtype=torch.bool)
    pos = torch.tensor([[0.0, 1.0, bad]])
    with pytest.raises(DataError, match="max_positions") as info:
        module(torch.zeros(1, 3, D), pos, mask)
    assert "\n" not in str(info.value)


def test_learned_ignores_positions_of_padding() -> None:
    """Padding beyond the table is fine: only real tokens must have a learned row."""
    module = LearnedPosition(D, LearnedParams(max_positions=4))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    out = module(torch.zeros(1, 6, D), default_positions(mask), mask)
    torch.testing.assert_close(out[0, :4], module.table.weight[:4], atol=0, rtol=0)


@pytest.mark.parametrize("layers", [1, 2])
def test_gru_step_by_step_equals_full_sequence(layers: int) -> None:
    module = GRUPosition(D, GRUParams(num_layers=layers))
    b, length = 3, 5
    x = torch.randn(b, length, D)
    mask = torch.ones(b, length, dtype=torch.bool)
    full = module(x, default_positions(mask), mask)
    state: dict = {}
    steps = [module(x[:, t : t + 1], torch.full((b, 1), float(t)), mask[:, :1], state) for t in range(length)]
    assert state["h"].shape == (b, layers, D)  # batch first, so beam search can reorder it
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-6, rtol=0)
    # h_i = GRU(wv_i, h_{i−1}) with a single-layer torch GRU as the reference (Eq. 8)
    if layers == 1:
        ref = torch.nn.GRUCell(D, D)
        ref.load_state_dict({k[:-3]: v for k, v in module.gru.state_dict().items()})
        h = torch.zeros(b, D)
        for t in range(length):
            h = ref(x[:, t], h)
            torch.testing.assert_close(full[:, t], h, atol=1e-6, rtol=0)


def test_gru_ignores_positions_and_right_padding() -> None:
    module = GRUPosition(D, GRUParams())
    x = torch.randn(1, 4, D)
    mask = torch.ones(1, 4, dtype=torch.bool)
    a = module(x, default_positions(mask), mask)
    b = module(x, default_positions(mask) + 100, mask)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    longer = torch.cat((x, torch.randn(1, 3, D)), 1)  # appended padding embeddings
    c = module(longer, default_positions(torch.ones(1, 7, dtype=torch.bool)), torch.ones(1, 7, dtype=torch.bool))
    torch.testing.assert_close(c[:, :4], a, atol=1e-6, rtol=0)
    assert not module.uses_positions


def test_no_position_is_identity() -> None:
    module = NoPosition(D, NoParams())
    x = torch.randn(2, 3, D)
    mask = torch.ones(2, 3, dtype=torch.bool)
    assert module(x, default_positions(mask), mask) is x
    assert not list(module.parameters())
