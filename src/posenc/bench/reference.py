"""The ``reference`` path of ``python -m posenc.bench.shaw_paths``: Shaw attention in the textbook
order of operations, the baseline the fast paths are timed against.

Shape legend: B batch, H heads, Lq/Lk query/key length, Dh head width.

The tests keep their own reference (``tests/helpers/reference_attention.py``), so what they check
the layer against never depends on this benchmark code, and the benchmark never imports the tests.
"""

from __future__ import annotations

import math
import types

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.models.attention import Hook, MultiHeadAttention
from posenc.positions.base import PositionContext


def textbook_shaw_attend(mha: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, hook: Hook,
                         ctx: PositionContext | None) -> Tensor:
    """Shaw et al. 2018 Eq. 3-5 as written: e = (q·kᵀ + q·a^K)/√Dh (Eq. 5), masked, α = softmax(e)
    (Eq. 2), z = α·v + Σ_j α_ij a^V_ij (Eq. 3), the hook's terms taken as given (a general index:
    gather for a^K, scatter for a^V) → ``(B, H, Lq, Dh)``; attention dropout as the layer's."""
    logits = torch.matmul(q, k.transpose(-1, -2))
    if hook.has_score:
        logits = logits + hook.score(q, ctx)
    logits = (logits / math.sqrt(mha.dh)).masked_fill(~allowed, float("-inf"))
    attn = F.dropout(torch.softmax(logits, dim=-1), mha.dropout if mha.training else 0.0, mha.training)
    out = torch.matmul(attn, v)
    return out + hook.value(attn, ctx) if hook.has_value else out


def use_textbook_shaw(mha: MultiHeadAttention) -> MultiHeadAttention:
    """``mha`` with every call routed through :func:`textbook_shaw_attend` (returns ``mha``)."""
    mha._attend = types.MethodType(textbook_shaw_attend, mha)  # type: ignore[method-assign]
    return mha
