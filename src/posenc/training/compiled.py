"""The forward pass and loss of a training step: under autocast, eager or through ``torch.compile``
(``train.compile``), optionally captured whole over static batch shapes (``reduce-overhead``).

Dynamic shapes: token batches vary in B and L, so dims 0 and 1 of every batch tensor are marked
dynamic (``maybe_mark_dynamic``) before each compiled call; the first compile is then already
shape-generic and later batches reuse it (only a size of 0/1 or the first B == L coincidence of
duck sizing adds a graph). The parameters stay static; the backward is compiled by AOTAutograd.
Validation stays eager (eval mode would be another graph).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from posenc.training.logging import log
from posenc.training.loss import LossFn, LossOutput
from posenc.training.precision import autocast

#: torch.compile's backend for ``train.compile`` (None: inductor). A seam for the CPU tests, which set
#: ``eager`` or ``aot_eager`` (tracing without code generation); with a backend set, no ``mode``.
COMPILE_BACKEND: str | None = None


def resolve_compile(mode: str, device: torch.device, capture: bool = True) -> bool:
    """Whether the training step goes through ``torch.compile``.

    Args:
        mode: ``train.compile``: ``auto`` (compiled on CUDA, eager on CPU), ``on``, ``off`` or
            ``reduce-overhead`` (compiled where the step is captured whole).
        device: the device the run trains on.
        capture: whether the step is captured whole (:func:`resolve_capture`), for
            ``reduce-overhead``.

    Returns:
        True to compile, False to train eagerly.
    """
    if mode == "reduce-overhead":
        return capture
    return device.type == "cuda" if mode == "auto" else mode == "on"


def capture_blockers(model: nn.Module) -> list[str]:
    """Why ``model``'s training step cannot be captured whole (``torch.compile(fullgraph=True)``, CUDA
    graphs): the ``capture_blocker`` of every submodule that declares ``capturable = False`` (a position
    method or a model declares it next to its code), one ``"ClassName: reason"`` each, sorted; empty
    when nothing does. tests/training/test_capture.py compiles every other registered method with
    ``fullgraph=True``.

    Args:
        model: the model to train.

    Returns:
        One ``"ClassName: reason"`` per blocking submodule class, sorted; empty when none blocks.
    """
    found = {f"{type(m).__name__}: {m.capture_blocker}" for m in model.modules()
             if getattr(m, "capturable", True) is False}
    return sorted(found)


def resolve_capture(mode: str, model: nn.Module) -> bool:
    """Whether the training step of ``model`` is captured whole: ``train.compile: reduce-overhead``
    and no submodule blocks it (:func:`capture_blockers`); where one does, one logged line says why
    and the run trains eagerly.

    Args:
        mode: ``train.compile``.
        model: the model to train.

    Returns:
        True when ``mode`` is ``reduce-overhead`` and nothing in ``model`` blocks capture.
    """
    if mode != "reduce-overhead":
        return False
    blockers = capture_blockers(model)
    if blockers:
        log.warning("train.compile=reduce-overhead: the step cannot be captured (%s); training eagerly",
                    "; ".join(blockers))
    return not blockers


def compile_options(capture: bool, device_type: str) -> dict[str, Any]:
    """The ``torch.compile`` keywords of a training step.

    Args:
        capture: capture the whole step (``train.compile: reduce-overhead``, :func:`resolve_capture`).
        device_type: the device the run trains on (``cuda``, ``cpu``).

    Returns:
        ``fullgraph`` set to ``capture``; :data:`COMPILE_BACKEND` as ``backend`` where it is set,
        else, with ``capture`` on CUDA, ``mode="reduce-overhead"`` (CUDA graphs).
    """
    options: dict[str, Any] = {"fullgraph": capture}
    if COMPILE_BACKEND is not None:
        options["backend"] = COMPILE_BACKEND
    elif capture and device_type == "cuda":
        options["mode"] = "reduce-overhead"
    return options


def bucketed(batch: Any, unbucketed: set[str]) -> Any:
    """``batch`` padded to its static shape (``batch.bucketed()``), as a captured step
    (:func:`resolve_capture`) takes it; a batch type without ``bucketed`` is used as it is, logged
    once per type.

    Args:
        batch: a training batch.
        unbucketed: the batch type names logged so far; a new one is added when logged.

    Returns:
        ``batch.bucketed()``, or ``batch`` itself when its type has no ``bucketed``.
    """
    if callable(getattr(batch, "bucketed", None)):
        return batch.bucketed()
    if type(batch).__name__ not in unbucketed:
        unbucketed.add(type(batch).__name__)
        log.warning("train.compile=reduce-overhead: %s batches have no bucketed(); their shapes are not padded",
                    type(batch).__name__)
    return batch


def batch_tensors(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor of a batch, so each can be marked dynamic before a compiled call.

    Args:
        batch: a tensor, or a dataclass, dict, list or tuple of those (nested).

    Yields:
        Each tensor it holds, in field, key or item order.
    """
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


def unwrap_compiled(model: nn.Module) -> nn.Module:
    """The module inside a compiled one, whose state_dict keys a checkpoint stores.

    Args:
        model: a module, compiled (``torch.compile``; its state_dict keys carry ``_orig_mod.``) or not.

    Returns:
        The module ``torch.compile`` wrapped, or ``model`` itself when it is not compiled.
    """
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, nn.Module) else model


class CompileFailed(Exception):
    """torch.compile itself failed on a step (not the model's code): the first line of its error."""


class CompiledLoss:
    """``batch -> loss_fn(net, batch)`` under autocast through ``torch.compile``, which once it
    fails (:class:`CompileFailed`) trains eagerly from then on, with one warning, where falling back
    is allowed (``train.compile: auto`` or ``reduce-overhead``); otherwise its error is raised.

    Compiling resets torch.compile's caches first: graphs are cached per code object (shared by
    every Trainer of the process, e.g. the cells of an experiment grid) and at most
    ``torch._dynamo.config.recompile_limit`` of them are kept before falling back to eager. With
    ``capture`` on CUDA each call begins a new CUDA-graph step (the previous step's outputs were
    read into the trainer's accumulators already).

    Args:
        eager: the eager step, ``batch -> loss_fn(net, batch)`` under autocast.
        fallback: train eagerly when compiling fails (``train.compile: auto``) instead of raising.
        device_type: the device the run trains on (``cuda``, ``cpu``).
        capture: capture the whole step (``train.compile: reduce-overhead``); it implies ``fallback``.
    """

    def __init__(self, eager: Callable[[Any], LossOutput], fallback: bool, device_type: str, capture: bool) -> None:
        torch._dynamo.reset()
        self.eager, self.fallback, self.capture = eager, fallback or capture, capture
        self.compiled = torch.compile(eager, **compile_options(capture, device_type))
        self.mark_step = capture and device_type == "cuda" and COMPILE_BACKEND is None
        self.call: Callable[[Any], LossOutput] = self.through_compile

    def __call__(self, batch: Any) -> LossOutput:
        return self.call(batch)

    def through_compile(self, batch: Any) -> LossOutput:
        """The step through the compiled function; where compiling fails and falling back is
        allowed, one warning and the eager step, which every later call takes.

        Args:
            batch: a training batch.

        Returns:
            The loss output of ``batch``.

        Raises:
            torch._dynamo.exc.TorchDynamoException: compiling failed and falling back is not
                allowed (also a ``GuardOnDataDependentSymNode``).
        """
        try:
            return self._compiled_step(batch)
        except CompileFailed as failure:
            mode = "reduce-overhead" if self.capture else "auto"
            warnings.warn(f"train.compile={mode}: torch.compile failed ({failure}); training eagerly "
                          "(set train.compile=off to skip compiling)", stacklevel=2)
            self.call = self.eager
            return self.eager(batch)

    def _compiled_step(self, batch: Any) -> LossOutput:
        for t in batch_tensors(batch):
            for dim in range(min(t.dim(), 2)):
                torch._dynamo.maybe_mark_dynamic(t, dim)
        if self.mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        try:
            return self.compiled(batch)
        except (torch._dynamo.exc.TorchDynamoException, GuardOnDataDependentSymNode) as err:
            if not self.fallback:
                raise
            raise CompileFailed(str(err).splitlines()[0] if str(err) else type(err).__name__) from err


def forward_loss(loss_fn: LossFn, net: nn.Module, precision: str, compiled: bool, fallback: bool = False,
                 device_type: str = "cuda", capture: bool = False) -> Callable[[Any], LossOutput]:
    """``batch -> loss_fn(net, batch)`` under autocast on ``device_type``: eager, or when
    ``compiled`` a :class:`CompiledLoss` (``fallback``: ``train.compile: auto``; ``capture``:
    ``reduce-overhead``, one graph per static shape, :func:`compile_options`).

    Args:
        loss_fn: the task's loss, ``loss_fn(net, batch) -> LossOutput``.
        net: the model as trained (DDP-wrapped where distributed).
        precision: the resolved precision (``fp32``, ``bf16``, ``fp16``) to autocast to.
        compiled: go through ``torch.compile`` (:func:`resolve_compile`).
        fallback: when compiled, train eagerly if compiling fails (``train.compile: auto``).
        device_type: the device the run trains on (``cuda``, ``cpu``).
        capture: when compiled, capture the whole step (:func:`resolve_capture`).

    Returns:
        The step, ``batch -> LossOutput``.
    """
    def run(batch: Any) -> LossOutput:
        with autocast(precision, device_type):
            return loss_fn(net, batch)

    return CompiledLoss(run, fallback, device_type, capture) if compiled else run
