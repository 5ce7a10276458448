"""Shared test fixtures: paths to the repository's data and a tiny model factory."""

from __future__ import annotations

import getpass
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def _inductor_cache_per_float_path() -> None:
    """Give Inductor an on-disk cache of this float path's own (``ATEN_CPU_CAPABILITY``; ``native``
    when unset), inherited by the workers tests start: Inductor's cache does not tell float paths
    apart, and a kernel compiled under one capability fails when a run under another loads it, so
    the suite could not run under each float path in turn. An explicit TORCHINDUCTOR_CACHE_DIR wins."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "user"
    path = os.environ.get("ATEN_CPU_CAPABILITY") or "native"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / f"torchinductor_{user}_{path}")


_inductor_cache_per_float_path()  # before any test compiles


@pytest.fixture(autouse=True)
def _seed_and_one_thread() -> Iterator[None]:
    """Seeded RNG; one intra-op thread (tiny models: faster, and no oversubscription on 2-core
    CI). The thread count is restored afterwards, since code under test may change it."""
    torch.manual_seed(0)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def shared_data() -> Path:
    return SHARED_DATA


def tiny_config(position: str = "ape", vocab: int = 40, **overrides):
    """A transformer-tiny ModelConfig with dropout off, for exact comparisons."""
    from posenc.models.config import ModelConfig

    pos = overrides.pop("position_params", {})
    kwargs = {"dropout": 0.0, **overrides}
    return ModelConfig.from_preset("transformer-tiny", vocab_size=vocab, position={"name": position, **pos}, **kwargs)
