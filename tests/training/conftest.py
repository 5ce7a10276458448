"""Training tests run single-threaded: the models are tiny and the CI machine is shared, where
intra-op thread pools only add contention. The previous setting is restored afterwards."""

from __future__ import annotations

from typing import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
