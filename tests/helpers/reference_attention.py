"""The textbook attention path with a value term, and the general Shaw context: references for
tests and ``benchmarks/shaw_paths.py`` (moved out of src, issue 19).

Shape legend: B batch, H heads, Lq/Lk query/key length, Dh head width.
"""

from __future__ import annotations

import math
import types

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


def use_reference_path(module: nn.Module, on: bool = True) -> None:
    """Route every :class:`MultiHeadAttention` in ``module`` through :func:`reference_attend` (or back)."""
    for m in module.modules():
        if isinstance(m, MultiHeadAttention):
            if on:
                m._attend = types.MethodType(reference_attend, m)  # type: ignore[method-assign]
            else:
                m.__dict__.pop("_attend", None)


def general_context(position: ShawRelativePosition, q_positions: Tensor, k_positions: Tensor) -> RelativeContext:
    """Shaw's general ``(B, 1, Lq, Lk)`` index for any positions (no Toeplitz fast path)."""
    return RelativeContext(relative_index(q_positions, k_positions, position.k))
