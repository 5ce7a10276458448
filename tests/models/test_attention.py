"""MultiHeadAttention: the null position hook is the plain softmax attention; the hook is the module's own."""

from __future__ import annotations

import inspect
import math

import torch

from posenc.models.attention import MultiHeadAttention, may_attend_mask
from posenc.positions.base import NullAttention
from tests.helpers.reference_attention import hooked


def test_null_hook_is_plain_scaled_dot_product_attention() -> None:
    torch.manual_seed(0)
    b, length, h, d = 2, 4, 2, 8
    mha = MultiHeadAttention(d, h).eval()
    x, mask = torch.randn(b, length, d), torch.tensor([[True] * 4, [True] * 2 + [False] * 2])
    allowed, null = may_attend_mask(mask, length, causal=True), NullAttention()
    out = mha(x, x, allowed, null.context(x[..., 0], x[..., 0]))  # the module's hook: a NullHook
    q, k, v = mha._split(mha.q_proj(x)), *mha.project_kv(x)
    logits = (q @ k.transpose(-1, -2) / math.sqrt(d // h)).masked_fill(~allowed, float("-inf"))
    ref = mha.out_proj((torch.softmax(logits, -1) @ v).transpose(1, 2).reshape(b, length, d))
    assert torch.allclose(out, ref, atol=1e-6) and torch.equal(out, mha(x, x, allowed))




def test_the_hook_is_the_modules_own() -> None:
    """Attention runs the hook it was built with: forward takes no hook (tests swap it with
    tests/helpers/reference_attention.hooked, which puts the module's own back)."""
    assert "hook" not in inspect.signature(MultiHeadAttention.forward).parameters
    own, other = NullAttention().hook(0), NullAttention().hook(0)
    mha = MultiHeadAttention(8, 2, hook=own)
    with hooked(mha, other):
        assert mha.hook is other
    assert mha.hook is own
