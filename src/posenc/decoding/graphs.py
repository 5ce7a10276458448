"""One decoding step captured as a CUDA graph and replayed (launch-bound GPU decoding).

Shape legend: N model rows (sentences × beams), V vocabulary.

Needs a fixed-shape decoding state (``model.init_static_state(..., fixed_shapes=True)``, whose
``steps`` is a :class:`~posenc.models.decoding_state.FixedSteps`): every step runs the same kernels on
the same buffers, the step index being a device counter. The step
is run through :meth:`GraphedStep._body`, which makes the state's addresses stable: a tensor
entry that ``model.step`` replaces (the GRU's hidden state) is copied back into the original
buffer, and :meth:`GraphedStep.step` copies the entries of the caller's (reordered) state into
those buffers before each replay. Key/value caches (:class:`~posenc.models.attention.KVCache`)
and :class:`~posenc.models.decoding_state.Unbatched` entries are shared objects, updated in place.

Off CUDA the same warm-up, restore and body run eagerly (the CPU-testable path). A step that synchronises
with the host (e.g. learned positions' range check) cannot be captured: the warm-up runs with
``torch.cuda.set_sync_debug_mode("error")`` so it raises before any capture, and the search falls
back to eager steps with a warning.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager, nullcontext
from typing import Any, Iterator

import torch
from torch import Tensor

__all__ = ["GraphedStep"]


class _Slot:
    """One tensor entry of a state: ``box[key]`` of a dict or list, or ``box.key`` of a dataclass."""

    def __init__(self, box: Any, key: Any) -> None:
        self.box, self.key, self.attr = box, key, dataclasses.is_dataclass(box)

    def get(self) -> Tensor:
        return getattr(self.box, self.key) if self.attr else self.box[self.key]

    def set(self, value: Tensor) -> None:
        if self.attr:
            setattr(self.box, self.key, value)
        else:
            self.box[self.key] = value


def _items(state: Any) -> Iterator[tuple[Any, Any]]:
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return ((f.name, getattr(state, f.name)) for f in dataclasses.fields(state))
    return iter(state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, list) else ())


def _slots(state: Any) -> Iterator[_Slot]:
    """Every tensor entry of a nested dataclass/dict/list state."""
    for key, value in _items(state):
        if isinstance(value, Tensor):
            yield _Slot(state, key)
        else:
            yield from _slots(value)


def copy_into(static: Any, fresh: Any) -> None:
    """Copy every tensor entry of ``fresh`` into the same entry of ``static`` (same structure) unless it is the
    same object."""
    for s_slot, f_slot in zip(list(_slots(static)), list(_slots(fresh))):
        if s_slot.get() is not f_slot.get():
            s_slot.get().copy_(f_slot.get())


@contextmanager
def _no_host_sync(cuda: bool) -> Iterator[None]:
    """On CUDA, make any host synchronisation raise ``RuntimeError`` (it could not be captured)."""
    if not cuda:
        yield
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


class GraphedStep:
    """``model.step`` over one fixed-shape ``state`` with input ``tokens (N,)``, captured once."""

    def __init__(self, model: Any, state: Any, tokens: Tensor, warmup: int = 2) -> None:
        """Warm up and (on CUDA) capture; elsewhere the same warm-up and restore run, then eager steps."""
        self.model, self.state, self.tokens = model, state, tokens.clone()
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: Tensor | None = None
        self._capture(warmup)

    def _body(self) -> Tensor:
        """One step on the static state; replaced tensor entries are written back into their buffers."""
        before = [(slot, slot.get()) for slot in _slots(self.state)]
        logits = self.model.step(self.tokens, self.state)
        for slot, old in before:
            if slot.get() is not old:
                old.copy_(slot.get())
                slot.set(old)
        return logits

    def _capture(self, warmup: int) -> None:
        """Warm up (allocates the caches; on a side stream on CUDA), capture on CUDA, then restore
        the state as it was; entries that the warm-up created (the GRU's hidden state) start at zero,
        which is what a missing entry means to the step that creates it."""
        saved = {(id(slot.box), slot.key): slot.get().clone() for slot in _slots(self.state)}
        steps = self.state.steps  # a FixedSteps
        counter = steps.counter.value.clone()
        cuda = self.tokens.is_cuda
        side = torch.cuda.Stream() if cuda else None
        if side is not None:
            side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(side) if side is not None else nullcontext(), _no_host_sync(cuda):
                for _ in range(warmup):
                    self._body()  # a step that synchronises raises here, before any capture
        finally:
            if side is not None:
                torch.cuda.current_stream().wait_stream(side)
        if side is not None:
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.logits = self._body()
        for slot in _slots(self.state):
            old = saved.get((id(slot.box), slot.key))
            slot.get().copy_(old) if old is not None else slot.get().zero_()
        steps.counter.value.copy_(counter)
        steps.step = 0

    def step(self, tokens: Tensor, state: Any) -> Tensor:
        """Logits ``(N, V)`` for ``tokens (N,)`` given the caller's ``state`` (same structure as the static one)."""
        self.tokens.copy_(tokens)
        copy_into(self.state, state)
        if self.graph is None:
            return self._body()
        self.graph.replay()
        assert self.logits is not None
        return self.logits
