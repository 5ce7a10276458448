"""The textbook attention path (every hook kind, or only hooks with a value term) and the general
Shaw context: references for the tests (``python -m posenc.bench.shaw_paths`` has its own,
``posenc/bench/reference.py``, so the installed package never imports the tests).

Shape legend: B batch, H heads, Lq/Lk query/key length, Dh head width.
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.models.attention import Hook, MultiHeadAttention
from posenc.positions.base import PositionContext
from posenc.positions.shaw import RelativeContext, ShawRelativePosition, relative_index


def reference_attend(mha: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, hook: Hook,
                     ctx: PositionContext | None) -> Tensor:
    """Shaw Eq. 3-5 in the textbook order for hooks with a value term: (q·k + q·a^K)/√Dh, mask,
    softmax, α·v + Σ α a^V → ``(B, H, Lq, Dh)``; every other call takes the layer's own path."""
    p = mha.dropout if mha.training else 0.0
    if not hook.has_value or hook.attend(q, k, v, allowed, ctx, p) is not None:
        return MultiHeadAttention._attend(mha, q, k, v, allowed, hook, ctx)
    logits = torch.matmul(q, k.transpose(-1, -2))
    if hook.has_score:
        logits = logits + hook.score(q, ctx)
    logits = (logits / math.sqrt(mha.dh)).masked_fill(~allowed, float("-inf"))
    attn = F.dropout(torch.softmax(logits, dim=-1), p, mha.training)
    return torch.matmul(attn, v) + hook.value(attn, ctx)


def textbook_attend(mha: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, hook: Hook,
                    ctx: PositionContext | None) -> Tensor:
    """softmax((q·k + q·a^K)/√Dh + bias, masked, then the logits hook)·v + Σ α a^V → ``(B, H, Lq, Dh)``, in
    the textbook order for every hook kind (Shaw Eq. 3-5; ALiBi, T5, FIRE biases; CoPE's logits hook):
    the reference of the layer's fused and in-place paths (eval mode: no dropout)."""
    logits = torch.matmul(q, k.transpose(-1, -2))
    if hook.has_score:
        logits = logits + hook.score(q, ctx)
    logits = logits / math.sqrt(mha.dh)
    if hook.has_bias:
        logits = logits + hook.bias(ctx)
    logits = logits.masked_fill(~allowed, float("-inf"))
    if hook.has_logits:
        logits = hook.logits(q, k, logits, ctx)
    attn = torch.softmax(logits, dim=-1)
    out = torch.matmul(attn, v)
    return out + hook.value(attn, ctx) if hook.has_value else out


def use_textbook_path(module: nn.Module) -> None:
    """Route every :class:`MultiHeadAttention` in ``module`` through :func:`textbook_attend`."""
    for m in module.modules():
        if isinstance(m, MultiHeadAttention):
            m._attend = types.MethodType(textbook_attend, m)  # type: ignore[method-assign]


def use_reference_path(module: nn.Module, on: bool = True) -> None:
    """Route every :class:`MultiHeadAttention` in ``module`` through :func:`reference_attend` (or back)."""
    for m in module.modules():
        if isinstance(m, MultiHeadAttention):
            if on:
                m._attend = types.MethodType(reference_attend, m)  # type: ignore[method-assign]
            else:
                m.__dict__.pop("_attend", None)


@contextmanager
def hooked(mha: MultiHeadAttention, hook: Hook) -> Iterator[MultiHeadAttention]:
    """``mha`` with ``hook`` as its position hook inside the block (tests and benchmarks that probe one
    module with several hooks), the hook it was built with again after it."""
    own = mha.slot.hook
    mha.slot.hook = hook
    try:
        yield mha
    finally:
        mha.slot.hook = own


def general_context(position: ShawRelativePosition, q_positions: Tensor, k_positions: Tensor) -> RelativeContext:
    """Shaw's general ``(B, 1, Lq, Lk)`` index for any positions (no Toeplitz fast path)."""
    return RelativeContext(relative_index(q_positions, k_positions, position.k))


def explicit_shaw(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, key_table: Tensor | None, value_table: Tensor | None,
                  index: Tensor) -> Tensor:
    """Shaw Eq. 3-4 with the ``(B, Lq, Lk, Dh)`` tensors a^K_ij = w^K_{r(i,j)}, a^V_ij = w^V_{r(i,j)}
    materialised (Eq. 6; ``index (B, 1, Lq, Lk)`` holds r(i, j)): e_ij = q_i·(k_j + a^K_ij)/√Dh,
    masked, softmax, z_i = Σ_j α_ij (v_j + a^V_ij). q, k, v ``(B, H, L, Dh)`` → ``(B, H, Lq, Dh)``;
    differentiable, the textbook reference of the fast paths (memory O(L²·Dh))."""
    logits = torch.matmul(q, k.transpose(-1, -2))
    if key_table is not None:
        logits = logits + torch.einsum("bhid,bijd->bhij", q, key_table[index[:, 0]])
    logits = (logits / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
    attn = torch.softmax(logits, -1)
    out = torch.matmul(attn, v)
    if value_table is not None:
        out = out + torch.einsum("bhij,bijd->bhid", attn, value_table[index[:, 0]])
    return out
