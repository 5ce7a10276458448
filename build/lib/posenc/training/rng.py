"""Random-number-generator state: seeding, capture/restore without pickle, isolation.

Exact resume needs the generators of ``random``, NumPy and torch (CPU and CUDA) to be restored
to their state right after the checkpointed update. Torch states are uint8 tensors (saved in
safetensors); the ``random`` and NumPy states are encoded as plain JSON lists.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed ``random``, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def host_state() -> dict[str, Any]:
    """JSON-able states of ``random`` and NumPy's global generator."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
    }


def set_host_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`host_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def torch_states(device: torch.device) -> dict[str, torch.Tensor]:
    """``{"torch": CPU state, "cuda": state of ``device``}`` (uint8 tensors)."""
    out = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def set_torch_states(states: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(states["torch"].to(torch.uint8).cpu())
    if device.type == "cuda" and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"].to(torch.uint8).cpu(), device)


@contextmanager
def isolated_rng(device: torch.device) -> Iterator[None]:
    """Run a block (validation, BLEU decoding) without disturbing any generator."""
    host, dev = host_state(), torch_states(device)
    try:
        yield
    finally:
        set_host_state(host)
        set_torch_states(dev, device)
