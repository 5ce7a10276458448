"""Shared test fixtures: paths to the repository's data and a tiny model factory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


# Tiny models: one intra-op thread is fastest and avoids oversubscription on 2-core CI.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def shared_data() -> Path:
    return SHARED_DATA


def tiny_config(position: str = "ape", vocab: int = 40, **overrides):
    """A transformer-tiny ModelConfig with dropout off, for exact comparisons."""
    from posenc.models.config import ModelConfig

    pos = overrides.pop("position_params", {})
    kwargs = {"dropout": 0.0, **overrides}
    return ModelConfig.from_preset("transformer-tiny", vocab_size=vocab, position={"name": position, **pos}, **kwargs)
