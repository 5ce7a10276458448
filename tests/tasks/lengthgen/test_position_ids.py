"""``data.position_ids: coupled``: the batch carries position coupling / Abacus ids and the model
reads them (instead of 0..L−1)."""

from __future__ import annotations

import pytest
import torch

from posenc.config import from_dict
from posenc.errors import ConfigError
from posenc.tasks.lengthgen.config import LengthgenConfig
from posenc.tasks.lengthgen.generators import PLUS, SYM
from posenc.tasks.lengthgen.task import LengthgenTask, collate, predictions, training_batch


def digits(text: str) -> list[int]:
    return [SYM + int(c) for c in text]


def test_collate_carries_coupled_ids() -> None:
    examples = [(digits("874") + [PLUS] + digits("59"), digits("3750")), (digits("1") + [PLUS] + digits("2"), digits("30"))]
    batch = collate(examples, "coupled")
    want = torch.tensor([[1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4], [1, 0, 1, 0, 1, 2, 0, 0, 0, 0, 0]], dtype=torch.float32)
    assert torch.equal(batch.positions, want)
    assert collate(examples).positions is None  # index: the model's own 0..L−1


def test_the_model_reads_the_coupled_ids() -> None:
    cfg = from_dict(LengthgenConfig, {"model": {"layers": 1, "d_model": 16, "heads": 2, "d_ff": 32,
                                                "position": {"name": "learned+shape", "shape": {"max_shift": 20}}},
                                      "data": {"task": "decimal_addition", "position_ids": "coupled", "batch_size": 4}})
    torch.manual_seed(0)
    model = LengthgenTask().build_model(cfg).eval()
    batch = training_batch(cfg, 0)
    assert batch.positions is not None and float(batch.positions.max()) <= cfg.data.train_max_length
    with torch.no_grad():
        logits, _ = predictions(model, batch)
        torch.testing.assert_close(logits, model(batch.tokens[:, :-1], batch.mask[:, :-1], batch.positions[:, :-1]))
        assert not torch.allclose(logits, model(batch.tokens[:, :-1], batch.mask[:, :-1]))


def test_unknown_position_ids_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="position_ids 'abacus' unknown"):
        from_dict(LengthgenConfig, {"data": {"task": "decimal_addition", "position_ids": "abacus"}})
