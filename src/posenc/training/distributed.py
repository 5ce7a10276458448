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
    """Where this process stands in the process group (:func:`init_distributed`).

    Args:
        rank: this process's rank, 0 .. ``world_size`` - 1.
        world_size: the number of processes; 1 when not distributed.
        local_rank: this process's GPU index on its node.
        owns_group: whether :func:`init_distributed` created the group (and :func:`cleanup` must
            destroy it).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # True when init_distributed created the group (and must destroy it)

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the process that writes files and logs."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """Whether training is distributed (more than one process): collectives run only then."""
        return self.world_size > 1


def env_int(name: str, default: int) -> int:
    """An integer the launcher set in the environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``).

    Args:
        name: the environment variable.
        default: the value when it is unset or empty.

    Returns:
        Its value as an integer, else ``default``.

    Raises:
        ConfigError: it is set to something other than an integer.
    """
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer") from None


def init_distributed(use_cuda: bool) -> DistInfo:
    """Join (or create) the default process group described by the environment.

    Args:
        use_cuda: the run trains on CUDA: the NCCL backend and this rank's GPU set as current;
            else Gloo.

    Returns:
        This process's :class:`DistInfo`: of the group already initialised, of a new one when
        ``WORLD_SIZE`` > 1, else rank 0 of 1.

    Raises:
        ConfigError: ``RANK`` is outside ``0..WORLD_SIZE-1``, an environment variable is not an
            integer, or ``WORLD_SIZE`` > 1 without torch.distributed.
    """
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
    """Destroy the process group if :func:`init_distributed` created it.

    Args:
        info: what :func:`init_distributed` returned.
    """
    if info.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def _comm_device(info: DistInfo) -> torch.device:
    if info.enabled and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum ``values`` over ranks.

    Args:
        values: this rank's tensor (the same shape on every rank).
        info: the process group's description.

    Returns:
        The element-wise sum over ranks, on ``values``' device; ``values`` itself when not
        distributed.
    """
    if not info.enabled:
        return values
    t = values.to(_comm_device(info))
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.to(values.device)


def all_reduce_min(value: int, info: DistInfo) -> int:
    """Minimum of an integer over ranks.

    Args:
        value: this rank's integer.
        info: the process group's description.

    Returns:
        The smallest ``value`` of all ranks; ``value`` itself when not distributed.
    """
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.long, device=_comm_device(info))
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def broadcast_floats(values: list[float], info: DistInfo) -> list[float]:
    """Rank 0's ``values`` on every rank.

    Args:
        values: this rank's floats, of the same length on every rank.
        info: the process group's description.

    Returns:
        Rank 0's ``values`` (through float64); ``values`` itself when not distributed.
    """
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=_comm_device(info))
    dist.broadcast(t, src=0)
    return t.tolist()


def gather_bytes(data: torch.Tensor, info: DistInfo) -> list[torch.Tensor]:
    """All ranks' bytes, gathered on every rank.

    Args:
        data: this rank's 1-D uint8 tensor; lengths may differ between ranks.
        info: the process group's description.

    Returns:
        Every rank's ``data`` on the CPU, in rank order; ``[data]`` when not distributed.
    """
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
    """Wait until every rank reaches this point (nothing when not distributed).

    Args:
        info: the process group's description.
    """
    if info.enabled:
        dist.barrier()
