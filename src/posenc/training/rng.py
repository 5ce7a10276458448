"""Random-number-generator state: seeding, capture/restore without pickle, isolation.

Exact resume needs the generators of ``random``, NumPy and torch (CPU and CUDA) to be restored
to their state right after the checkpointed update. Torch states are uint8 tensors (saved in
safetensors); the ``random`` and NumPy states are encoded as plain JSON lists. A checkpoint keeps
every rank's states (:func:`rank_states`) and each rank restores its own (:func:`restore_rank_states`).
"""

from __future__ import annotations

import json
import random
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import torch

from posenc.errors import CheckpointError
from posenc.training.distributed import DistInfo, gather_bytes

if TYPE_CHECKING:
    from posenc.training.checkpoint import Checkpoint


def seed_everything(seed: int) -> None:
    """Seed ``random``, NumPy and torch (all devices).

    Args:
        seed: the seed (NumPy takes it modulo 2**32).
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def host_state() -> dict[str, Any]:
    """The states of ``random`` and NumPy's global generator, as JSON can hold them.

    Returns:
        ``{"python": [...], "numpy": [...]}``, JSON-safe lists; :func:`set_host_state` restores them.
    """
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
    }


def set_host_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`host_state`.

    Args:
        state: what :func:`host_state` returned (through JSON or not).
    """
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def torch_states(device: torch.device) -> dict[str, torch.Tensor]:
    """The torch generators' states.

    Args:
        device: the device the run trains on; a CUDA device's generator is included.

    Returns:
        ``{"torch": CPU state}``, with ``"cuda"``: ``device``'s state on CUDA (uint8 tensors).
    """
    out = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def set_torch_states(states: dict[str, torch.Tensor], device: torch.device) -> None:
    """Inverse of :func:`torch_states`.

    Args:
        states: what :func:`torch_states` returned (the tensors may come from a checkpoint); a
            ``"cuda"`` state is restored only on a CUDA ``device``.
        device: the device the run trains on.
    """
    torch.set_rng_state(states["torch"].to(torch.uint8).cpu())
    if device.type == "cuda" and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"].to(torch.uint8).cpu(), device)


@contextmanager
def isolated_rng(device: torch.device) -> Iterator[None]:
    """Run a block (validation, a task's metric) without disturbing any generator.

    Args:
        device: the device the run trains on (its generator is restored too).

    Yields:
        Nothing: every generator is restored when the block is left.
    """
    host, dev = host_state(), torch_states(device)
    try:
        yield
    finally:
        set_host_state(host)
        set_torch_states(dev, device)


def rank_states(dist: DistInfo, device: torch.device) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """Every rank's generator states as a checkpoint keeps them (a collective: every rank calls
    it): the torch ones as uint8 tensors named ``rng.<name>.<rank>``, the host ones
    (:func:`host_state`) as a list by rank.

    Args:
        dist: the process group's description.
        device: this rank's device.

    Returns:
        ``(tensors, hosts)``: the torch states named ``rng.<name>.<rank>``, and each rank's host
        states in rank order.
    """
    tensors: dict[str, torch.Tensor] = {}
    for name, state in torch_states(device).items():
        for rank, t in enumerate(gather_bytes(state, dist)):
            tensors[f"rng.{name}.{rank}"] = t
    host = torch.frombuffer(bytearray(json.dumps(host_state()).encode()), dtype=torch.uint8)
    hosts = [json.loads(bytes(t.tolist()).decode()) for t in gather_bytes(host, dist)]
    return tensors, hosts


def restore_rank_states(ckpt: Checkpoint, dist: DistInfo, device: torch.device, reseed: int) -> None:
    """This rank's generators as :func:`rank_states` left them in ``ckpt`` (its state's ``rng.host``
    list and tensors); a checkpoint saved with another world size has no states of this rank's
    stream, so the generators are seeded with ``reseed`` instead (with a warning).

    Args:
        ckpt: the checkpoint resumed from, loaded with its optimizer tensors.
        dist: the process group's description.
        device: this rank's device.
        reseed: the seed when ``ckpt`` holds no states of this rank.

    Raises:
        CheckpointError: ``ckpt`` lacks this rank's torch state.
    """
    rank, hosts = dist.rank, ckpt.state.get("rng", {}).get("host", [])
    if ckpt.state.get("world_size") != dist.world_size or rank >= len(hosts):
        warnings.warn(
            f"{ckpt.path.name}: saved with world size {ckpt.state.get('world_size')}, now "
            f"{dist.world_size}; reseeding instead of restoring the exact RNG states", stacklevel=3
        )
        seed_everything(reseed)
        return
    set_host_state(hosts[rank])
    states = {name: ckpt.tensors[f"rng.{name}.{rank}"] for name in ("torch", "cuda")
              if f"rng.{name}.{rank}" in ckpt.tensors}
    if "torch" not in states:
        raise CheckpointError(f"{ckpt.path}: optim.safetensors lacks the torch RNG state of rank {rank}")
    set_torch_states(states, device)
