"""Run-time helpers of the training loop: device and precision resolution, autocast, moving
batches, the gradient norm, the optimizer by name, the training wall clock and the validation
loss. Kept apart from the loop (trainer.py) and the state persistence (state.py).
"""

from __future__ import annotations

import math
import time
import warnings
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, ContextManager, Iterable, Iterator, Sequence

import torch
from torch import nn

from posenc.errors import ConfigError, DataError
from posenc.training.distributed import DistInfo
from posenc.training.config import TrainConfig
from posenc.training.loss import LossOutput

LossFn = Callable[[nn.Module, Any], LossOutput]
ValidSource = Sequence[Any] | Callable[[], Iterable[Any]]


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` → CUDA when available, else CPU; ``cuda`` without a GPU is a ConfigError."""
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device is 'cuda' but no CUDA device is available")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def resolve_precision(precision: str, device: torch.device) -> str:
    """bf16/fp16 autocast only on CUDA; on CPU fall back to fp32 with a warning."""
    if precision != "fp32" and device.type != "cuda":
        warnings.warn(f"train.precision={precision} needs CUDA; training in fp32 on {device}", stacklevel=2)
        return "fp32"
    return precision


def move_to(batch: Any, device: torch.device) -> Any:
    """Move a batch (object with ``.to``, tensor, dict, list or tuple of those) to ``device``."""
    if hasattr(batch, "to") and callable(batch.to):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: move_to(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to(v, device) for v in batch)
    return batch


def total_norm(params: list[nn.Parameter], clip_norm: float) -> torch.Tensor:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if clip_norm > 0:
        return nn.utils.clip_grad_norm_(params, clip_norm)
    if hasattr(nn.utils, "get_total_norm"):
        return nn.utils.get_total_norm(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def build_optimizer(params: list[nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """``train.optimizer``: Adam (L2 ``weight_decay`` in the gradient) or AdamW (decoupled)."""
    kind = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return kind(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)


def autocast(precision: str) -> ContextManager[Any]:
    """CUDA autocast for bf16/fp16, a no-op for fp32."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast("cuda", dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


class WallClock:
    """Training wall clock: this session's time plus the resumed run's, minus the time spent
    validating and checkpointing (so curves vs wall clock compare training speed)."""

    def __init__(self, before: float = 0.0) -> None:
        self.start, self.before = time.perf_counter(), before
        self.overhead_s = 0.0  # validation/checkpoint time of this session
        self.pause_start: float | None = None

    def wall_s(self) -> float:
        now = time.perf_counter()
        paused = now - self.pause_start if self.pause_start is not None else 0.0
        return self.before + now - self.start - self.overhead_s - paused

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Exclude the block's duration from :meth:`wall_s` (nesting is allowed)."""
        if self.pause_start is not None:
            yield
            return
        self.pause_start = time.perf_counter()
        try:
            yield
        finally:
            self.overhead_s += time.perf_counter() - self.pause_start
            self.pause_start = None


def validation_loss(model: nn.Module, loss_fn: LossFn, batches: ValidSource, device: torch.device, precision: str) -> dict[str, float]:
    """Loss, NLL and perplexity per target token (item) on ``batches`` (eval mode, no grad)."""
    source = batches() if callable(batches) else batches
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    model.eval()
    try:
        with torch.no_grad(), autocast(precision):
            for batch in source:
                out = loss_fn(model, move_to(batch, device))
                ntok = torch.as_tensor(out.ntokens, device=device).double()
                sums += torch.stack([out.loss.double(), out.nll.double(), ntok])
    finally:
        model.train()
    loss, nll, ntokens = sums.tolist()
    if ntokens <= 0:
        raise DataError("validation batches contain no target tokens")
    return {"loss": loss / ntokens, "nll": nll / ntokens, "ppl": math.exp(min(nll / ntokens, 700.0)), "ntokens": ntokens}


def wrap_ddp(model: nn.Module, dist: DistInfo, device: torch.device, find_unused: bool) -> nn.Module:
    """``model`` wrapped in DistributedDataParallel under torchrun, else itself."""
    if not dist.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused)
