"""Process-group handling so that the trainer runs unchanged under ``torchrun``.

``torchrun`` (or any launcher) sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``; with ``WORLD_SIZE > 1`` :func:`init_distributed` creates the default process
group (NCCL on CUDA, Gloo on CPU). A single process without those variables runs as rank 0 of 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from posenc.errors import ConfigError


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # True when init_distributed created the group (and must destroy it)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer") from None


def init_distributed(use_cuda: bool) -> DistInfo:
    """Join (or create) the default process group described by the environment."""
    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), env_int("LOCAL_RANK", 0), owns_group=False)
    world = env_int("WORLD_SIZE", 1)
    if world <= 1:
        return DistInfo()
    rank, local = env_int("RANK", 0), env_int("LOCAL_RANK", 0)
    if not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE={world})")
    if not dist.is_available():
        raise ConfigError("WORLD_SIZE > 1 but torch.distributed is not available in this build")
    if use_cuda:
        torch.cuda.set_device(local)
    dist.init_process_group(backend="nccl" if use_cuda else "gloo", rank=rank, world_size=world)
    return DistInfo(rank, world, local, owns_group=True)


def cleanup(info: DistInfo) -> None:
    """Destroy the process group if :func:`init_distributed` created it."""
    if info.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def _comm_device(info: DistInfo) -> torch.device:
    if info.enabled and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum ``values`` over ranks (returns a tensor on the input's device)."""
    if not info.enabled:
        return values
    t = values.to(_comm_device(info))
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.to(values.device)


def all_reduce_min(value: int, info: DistInfo) -> int:
    """Minimum of an integer over ranks."""
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.long, device=_comm_device(info))
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def broadcast_floats(values: list[float], info: DistInfo) -> list[float]:
    """Rank 0's ``values`` on every rank (same length required everywhere)."""
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=_comm_device(info))
    dist.broadcast(t, src=0)
    return t.tolist()


def gather_bytes(data: torch.Tensor, info: DistInfo) -> list[torch.Tensor]:
    """All ranks' 1-D uint8 tensors (possibly of different lengths), in rank order."""
    if not info.enabled:
        return [data]
    dev = _comm_device(info)
    n = torch.tensor([data.numel()], dtype=torch.long, device=dev)
    sizes = [torch.zeros_like(n) for _ in range(info.world_size)]
    dist.all_gather(sizes, n)
    longest = max(int(s.item()) for s in sizes)
    padded = torch.zeros(longest, dtype=torch.uint8, device=dev)
    padded[: data.numel()] = data.to(dev)
    out = [torch.zeros_like(padded) for _ in range(info.world_size)]
    dist.all_gather(out, padded)
    return [o[: int(s.item())].cpu() for o, s in zip(out, sizes)]


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()
