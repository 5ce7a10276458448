"""``data.eval_position``: train plain, evaluate with other parameter-free position options (RoPE
scaling at test time, as these methods are used); the trained weights are evaluated unchanged."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.config import from_dict, merge_overrides
from posenc.errors import ConfigError
from posenc.tasks.lengthgen.config import LengthgenConfig
from posenc.tasks.lengthgen.generators import VOCAB_SIZE
from posenc.tasks.lengthgen.task import LengthgenTask, evaluation_model

YARN = ["data.eval_position.rope.scaling=yarn", "data.eval_position.rope.factor=4", "data.eval_position.rope.original_max_position=8"]


def cfg_with(position: str, overrides: list[str]) -> LengthgenConfig:
    base = {"model": {"layers": 1, "d_model": 16, "heads": 2, "d_ff": 32, "position": {"name": position}},
            "data": {"task": "copy", "train_max_length": 8}}
    return from_dict(LengthgenConfig, merge_overrides(base, overrides, LengthgenConfig))


def test_eval_position_applies_rope_scaling_at_test_time_only() -> None:
    cfg = cfg_with("rope", YARN)
    torch.manual_seed(0)
    model = LengthgenTask().build_model(cfg).eval()
    assert model.cfg.position.rope.scaling == "none"  # trained plain
    scaled = evaluation_model(cfg, model)
    assert scaled is not model and scaled.cfg.position.rope.scaling == "yarn"
    assert scaled.stack.attn_pos.scale == pytest.approx(0.1 * math.log(4) + 1)
    for key, value in model.state_dict().items():
        assert torch.equal(scaled.state_dict()[key], value), key  # the same weights
    tokens = torch.randint(3, VOCAB_SIZE, (2, 30))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    with torch.no_grad():
        assert not torch.allclose(scaled(tokens, mask), model(tokens, mask))
    assert evaluation_model(cfg_with("rope", []), model) is model  # empty: evaluated as trained


def test_bad_or_parameter_changing_eval_position_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="rope.scalin"):
        cfg_with("rope", ["data.eval_position.rope.scalin=yarn"])
    with pytest.raises(ConfigError, match="original_max_position"):
        cfg_with("rope", ["data.eval_position.rope.scaling=yarn"])
    cfg = cfg_with("t5", ["data.eval_position.t5.num_buckets=8"])  # a table of another size
    with pytest.raises(ConfigError, match="parameter-free"):
        evaluation_model(cfg, LengthgenTask().build_model(cfg))
