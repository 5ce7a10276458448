"""Where a training step runs: the device (``train.device``), the DDP wrapper under ``torchrun``,
and batches moved onto the device without waiting for it."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from posenc.errors import ConfigError
from posenc.training.distributed import DistInfo


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """The device a run trains on.

    Args:
        name: ``train.device``: ``auto`` (CUDA when available, else the CPU), ``cpu`` or ``cuda``.
        local_rank: this process's GPU index on its node (``LOCAL_RANK`` under torchrun).

    Returns:
        ``cuda:<local_rank>`` or ``cpu``.

    Raises:
        ConfigError: ``name`` is ``cuda`` and no CUDA device is available.
    """
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device is 'cuda' but no CUDA device is available")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def device_label(device: torch.device) -> str:
    """Where a run trains, for its summary and reports: ``cpu``, or ``cuda`` with the GPU's name
    (``cuda: NVIDIA H200``): wall-clock times compare only between runs of one kind of machine.

    Args:
        device: the device the run trains on.

    Returns:
        The device type (``cpu``), or ``cuda: `` and the GPU's name.
    """
    if device.type != "cuda":
        return device.type
    return f"cuda: {torch.cuda.get_device_name(device)}"


def wrap_ddp(model: nn.Module, dist: DistInfo, device: torch.device, find_unused: bool) -> nn.Module:
    """``model`` wrapped in DistributedDataParallel under torchrun, else itself.

    Args:
        model: the model, on ``device``.
        dist: the process group's description (:func:`~posenc.training.distributed.init_distributed`).
        device: this rank's device (a CUDA device's index becomes DDP's ``device_ids``).
        find_unused: DDP's ``find_unused_parameters`` (for models whose step leaves parameters
            without a gradient).

    Returns:
        The DDP-wrapped model when ``dist`` is enabled (world size > 1), else ``model``.
    """
    if not dist.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused)


def move_to(batch: Any, device: torch.device) -> Any:
    """Move a batch (object with ``.to``, tensor, dict, list or tuple of those) to ``device``.

    To CUDA, tensors and dataclass batches go through pinned memory with ``non_blocking=True``,
    so the copy does not wait for the GPU's queue (no host sync per step).

    Args:
        batch: a batch: an object with ``.to``, a tensor, a dataclass, or a dict, list or tuple of
            those (nested); anything else is returned as it is.
        device: the device to move it to.

    Returns:
        The batch of the same structure with its tensors on ``device``.
    """
    if device.type == "cuda":
        return _to_cuda(batch, device)
    if hasattr(batch, "to") and callable(batch.to):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: move_to(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to(v, device) for v in batch)
    return batch


def _to_cuda(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        if batch.device.type == "cpu":
            return batch.pin_memory().to(device, non_blocking=True)
        return batch.to(device)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        moved = {f.name: _to_cuda(getattr(batch, f.name), device) for f in dataclasses.fields(batch)
                 if f.init and isinstance(getattr(batch, f.name), torch.Tensor)}
        return dataclasses.replace(batch, **moved)
    if isinstance(batch, dict):
        return {k: _to_cuda(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)) and not hasattr(batch, "_fields"):
        return type(batch)(_to_cuda(v, device) for v in batch)
    if hasattr(batch, "to") and callable(batch.to):
        return batch.to(device)
    return batch
