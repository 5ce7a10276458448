"""Run-time helpers of the training loop: device, precision, compile and capture resolution,
autocast and the compiled forward+loss, moving batches, the gradient norm, the optimizer by name,
the training wall clock and the validation loss. Kept apart from the loop (trainer.py) and the
state persistence (state.py, checkpoint.py: restoring an optimizer's state lives there).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Iterator, Sequence

import torch
from torch import nn
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from posenc.errors import ConfigError, DataError
from posenc.training.config import TrainConfig
from posenc.training.distributed import DistInfo
from posenc.training.logging import log
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


def device_label(device: torch.device) -> str:
    """Where a run trains, for its summary and reports: ``cpu``, or ``cuda`` with the GPU's name
    (``cuda: NVIDIA H200``): wall-clock times compare only between runs of one kind of machine."""
    if device.type != "cuda":
        return device.type
    return f"cuda: {torch.cuda.get_device_name(device)}"


#: ``/proc/cpuinfo`` flags of a CPU that computes bf16 products natively (x86: AVX512-BF16, AMX).
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})

#: ``precision: auto`` on a CPU with native bf16 trains in bf16 autocast only from this model width
#: (d_model) on. Measured on a 2-core AMD EPYC (Zen 4, avx512_bf16;
#: ``python -m posenc.bench.cpu_bf16``, docs/performance.md): forward + backward +
#: Adam of posenc's translation model, 4,096-token batches, interleaved rounds: bf16 1.32-1.55× fp32
#: at d_model 256 (transformer-small), 0.90-1.09× at 128 and 0.75-1.03× at 64. Below the crossover
#: bf16 is no faster, so ``auto`` keeps fp32 there (every shipped CPU config has d_model <= 128).
CPU_BF16_MIN_WIDTH = 256


def cpu_bf16_flags(cpuinfo: str) -> bool:
    """Does a ``/proc/cpuinfo`` text list a native bf16 flag (:data:`CPU_BF16_FLAGS`) on its
    ``flags`` lines?"""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags" and CPU_BF16_FLAGS & set(value.split()):
            return True
    return False


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """Whether this machine's CPU has native bf16, never guessed: the flags of ``/proc/cpuinfo``,
    or where that file is absent (not Linux) torch's own probe when this torch has one
    (``torch._C._cpu._is_avx512_bf16_supported``, ``_is_amx_tile_supported``), else False."""
    try:
        return cpu_bf16_flags(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        probes = [getattr(torch._C._cpu, name, None)
                  for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        return any(bool(probe()) for probe in probes if callable(probe))


def resolve_precision(precision: str, device: torch.device, width: int | None = None) -> str:
    """The precision a run trains in, ``fp32``, ``bf16`` or ``fp16``.

    ``auto`` → bf16 on a CUDA device with bf16 support; on a CPU, bf16 where it is measured
    faster: a native-bf16 CPU (:func:`cpu_has_native_bf16`) and a model ``width`` (d_model) of at
    least :data:`CPU_BF16_MIN_WIDTH` (None: unknown, fp32); else fp32, silently. An explicit
    ``bf16`` trains in bf16 autocast on the CPU too (warning where the CPU emulates it); ``fp16``
    needs CUDA (its loss scaler): on a CPU it falls back to fp32 with a warning.

    The one resolution of ``precision``: the trainer, the run fingerprint
    (runs/fingerprint.py) and the benchmarks (bench/core.py) all call it."""
    cuda = device.type == "cuda"
    if precision == "auto":
        if cuda:
            return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
        wide = width is not None and width >= CPU_BF16_MIN_WIDTH
        return "bf16" if device.type == "cpu" and wide and cpu_has_native_bf16() else "fp32"
    if precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        warnings.warn("train.precision=bf16 on a CPU without native bf16 (no avx512_bf16/amx_bf16 flag): "
                      "emulated, expect it slower than fp32", stacklevel=2)
    if precision == "fp16" and not cuda:
        warnings.warn(f"train.precision={precision} needs CUDA; training in fp32 on {device}", stacklevel=2)
        return "fp32"
    return precision


def resolve_compile(mode: str, device: torch.device, capture: bool = True) -> bool:
    """``train.compile``: ``auto`` → compiled on CUDA, eager on CPU; ``on`` compiled, ``off`` eager;
    ``reduce-overhead`` compiled where the step is captured (``capture``, :func:`resolve_capture`),
    else eager."""
    if mode == "reduce-overhead":
        return capture
    return device.type == "cuda" if mode == "auto" else mode == "on"


def capture_blockers(model: nn.Module) -> list[str]:
    """Why ``model``'s training step cannot be captured whole (``torch.compile(fullgraph=True)``, CUDA
    graphs): the ``capture_blocker`` of every submodule that declares ``capturable = False`` (a position
    method or a model declares it next to its code), one ``"ClassName: reason"`` each, sorted; empty
    when nothing does. tests/training/test_capture.py compiles every other registered method with
    ``fullgraph=True``."""
    found = {f"{type(m).__name__}: {m.capture_blocker}" for m in model.modules()
             if getattr(m, "capturable", True) is False}
    return sorted(found)


def resolve_capture(mode: str, model: nn.Module) -> bool:
    """Whether the training step of ``model`` is captured whole: ``train.compile: reduce-overhead``
    and no submodule blocks it (:func:`capture_blockers`); where one does, one logged line says why
    and the run trains eagerly."""
    if mode != "reduce-overhead":
        return False
    blockers = capture_blockers(model)
    if blockers:
        log.warning("train.compile=reduce-overhead: the step cannot be captured (%s); training eagerly",
                    "; ".join(blockers))
    return not blockers


#: torch.compile's backend for ``train.compile`` (None: inductor). A seam for the CPU tests, which set
#: ``eager`` or ``aot_eager`` (tracing without code generation); with a backend set, no ``mode``.
COMPILE_BACKEND: str | None = None


def compile_options(capture: bool, device_type: str) -> dict[str, Any]:
    """``torch.compile`` keywords: ``capture`` (``train.compile: reduce-overhead``) traces the whole
    step (``fullgraph``) and, with inductor on CUDA, replays it as CUDA graphs (``mode="reduce-overhead"``)."""
    options: dict[str, Any] = {"fullgraph": capture}
    if COMPILE_BACKEND is not None:
        options["backend"] = COMPILE_BACKEND
    elif capture and device_type == "cuda":
        options["mode"] = "reduce-overhead"
    return options


def move_to(batch: Any, device: torch.device) -> Any:
    """Move a batch (object with ``.to``, tensor, dict, list or tuple of those) to ``device``.

    To CUDA, tensors and dataclass batches go through pinned memory with ``non_blocking=True``,
    so the copy does not wait for the GPU's queue (no host sync per step)."""
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


def bucketed(batch: Any, unbucketed: set[str]) -> Any:
    """``batch`` padded to its static shape (``batch.bucketed()``), as a captured step
    (:func:`resolve_capture`) takes it; a batch type without ``bucketed`` is used as it is, logged
    once per type (``unbucketed`` holds the type names logged so far)."""
    if callable(getattr(batch, "bucketed", None)):
        return batch.bucketed()
    if type(batch).__name__ not in unbucketed:
        unbucketed.add(type(batch).__name__)
        log.warning("train.compile=reduce-overhead: %s batches have no bucketed(); their shapes are not padded",
                    type(batch).__name__)
    return batch


def batch_tensors(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor of a batch (tensor, dataclass, dict, list or tuple of those)."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        for f in dataclasses.fields(batch):
            yield from batch_tensors(getattr(batch, f.name))
    elif isinstance(batch, dict):
        for v in batch.values():
            yield from batch_tensors(v)
    elif isinstance(batch, (list, tuple)):
        for v in batch:
            yield from batch_tensors(v)


def total_norm(params: list[nn.Parameter], clip_norm: float) -> torch.Tensor:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if clip_norm > 0:
        return nn.utils.clip_grad_norm_(params, clip_norm)
    if hasattr(nn.utils, "get_total_norm"):
        return nn.utils.get_total_norm(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


#: torch's fused Adam/AdamW run on the CPU from 2.4 on.
_CPU_FUSED_ADAM = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 4)


def build_optimizer(
    params: list[nn.Parameter], cfg: TrainConfig, device: torch.device | None = None
) -> torch.optim.Optimizer:
    """``train.optimizer``: Adam (L2 ``weight_decay`` in the gradient) or AdamW (decoupled).

    The fused kernel (``fused=True``: one pass over all parameters) on CUDA, and on the CPU where
    torch has it (2.4 and later: 2.4× faster than the for-loop on transformer-small, which
    ``foreach`` is not on the CPU, docs/perf/cpu_step.md), else the multi-tensor ``foreach``
    implementation; all compute the same update (Kingma & Ba 2015, Alg. 1), the fused one with
    its own rounding (a few float32 ulps)."""
    kind = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    fused = device is not None and (device.type == "cuda" or (device.type == "cpu" and _CPU_FUSED_ADAM))
    impl = {"fused": True} if fused else {"foreach": True}
    return kind(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay, **impl)


def autocast(precision: str, device_type: str = "cuda") -> ContextManager[Any]:
    """Autocast on ``device_type`` (``cuda`` or ``cpu``) for bf16/fp16, a no-op for fp32.

    Parameters, gradients and the optimizer's state stay float32 (master weights); the matrix
    products run in the low precision and the losses cast their logits to float32
    (training/loss.py)."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def forward_loss(loss_fn: LossFn, net: nn.Module, precision: str, compiled: bool, fallback: bool = False,
                 device_type: str = "cuda", capture: bool = False) -> Callable[[Any], LossOutput]:
    """``batch -> loss_fn(net, batch)`` under autocast on ``device_type``, through ``torch.compile``
    when ``compiled``.

    Dynamic shapes: token batches vary in B and L, so dims 0 and 1 of every batch tensor are
    marked dynamic (``maybe_mark_dynamic``) before each call; the first compile is then already
    shape-generic and later batches reuse it (only a size of 0/1 or the first B == L coincidence
    of duck sizing adds a graph). ``net``'s parameters stay static; the backward is compiled by
    AOTAutograd. Validation stays eager (eval mode would be another graph).

    Compiling resets torch.compile's caches first: graphs are cached per code object (``run``
    here, shared by every Trainer of the process, e.g. the cells of an experiment grid) and at
    most ``torch._dynamo.config.recompile_limit`` of them are kept before falling back to eager.
    With ``fallback`` (``train.compile: auto``) a failure of torch.compile itself warns and
    trains eagerly from then on; otherwise (``on``) it is raised.

    ``capture`` (``reduce-overhead``): one graph (:func:`compile_options`), a failure to trace it
    falls back as ``fallback`` does; on CUDA each call begins a new CUDA-graph step (the previous
    step's outputs were read into the trainer's accumulators already)."""
    def run(batch: Any) -> LossOutput:
        with autocast(precision, device_type):
            return loss_fn(net, batch)

    if not compiled:
        return run
    torch._dynamo.reset()
    compiled_run = torch.compile(run, **compile_options(capture, device_type))
    fallback = fallback or capture
    mark_step = capture and device_type == "cuda" and COMPILE_BACKEND is None
    failed: list[str] = []

    def run_compiled(batch: Any) -> LossOutput:
        if failed:
            return run(batch)
        for t in batch_tensors(batch):
            for dim in range(min(t.dim(), 2)):
                torch._dynamo.maybe_mark_dynamic(t, dim)
        if mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        try:
            return compiled_run(batch)
        except (torch._dynamo.exc.TorchDynamoException, GuardOnDataDependentSymNode) as err:
            if not fallback:
                raise
            failed.append(str(err).splitlines()[0] if str(err) else type(err).__name__)
            mode = "reduce-overhead" if capture else "auto"
            warnings.warn(f"train.compile={mode}: torch.compile failed ({failed[0]}); training eagerly "
                          "(set train.compile=off to skip compiling)", stacklevel=2)
            return run(batch)

    return run_compiled


def unwrap_compiled(model: nn.Module) -> nn.Module:
    """The module inside a compiled one (``torch.compile``; its state_dict keys carry ``_orig_mod.``)."""
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, nn.Module) else model


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


def validation_loss(
    model: nn.Module, loss_fn: LossFn, batches: ValidSource, device: torch.device, precision: str
) -> dict[str, float]:
    """Loss, NLL and perplexity per target token (item) on ``batches`` (eval mode, no grad)."""
    source = batches() if callable(batches) else batches
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    model.eval()
    try:
        with torch.no_grad(), autocast(precision, device.type):
            for batch in source:
                out = loss_fn(model, move_to(batch, device))
                ntok = torch.as_tensor(out.ntokens, device=device).double()
                sums += torch.stack([out.loss.double(), out.nll.double(), ntok])
    finally:
        model.train()
    loss, nll, ntokens = sums.tolist()
    if ntokens <= 0:
        raise DataError("validation batches contain no target tokens")
    return {"loss": loss / ntokens, "nll": nll / ntokens, "ppl": math.exp(min(nll / ntokens, 700.0)),
            "ntokens": ntokens}


def wrap_ddp(model: nn.Module, dist: DistInfo, device: torch.device, find_unused: bool) -> nn.Module:
    """``model`` wrapped in DistributedDataParallel under torchrun, else itself."""
    if not dist.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused)
