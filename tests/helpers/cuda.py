"""The marker of CUDA-only tests: ``@cuda_only(reason)`` marks a test ``cuda`` (selected on a GPU
machine with ``pytest -m cuda``, as benchmarks/gpu_session.sh does) and skips it without CUDA."""

from __future__ import annotations

from typing import Callable, TypeVar

import pytest
import torch

F = TypeVar("F", bound=Callable[..., object])


def cuda_only(reason: str = "needs CUDA") -> Callable[[F], F]:
    """Decorator: ``pytest.mark.cuda`` plus a skip (with ``reason``) where no CUDA device is visible."""
    skip = pytest.mark.skipif(not torch.cuda.is_available(), reason=reason)

    def deco(fn: F) -> F:
        return pytest.mark.cuda(skip(fn))

    return deco
