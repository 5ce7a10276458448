"""Encoder and decoder layers, post-LN (Vaswani et al.) or pre-LN.

Shape legend: B batch, L length, S source length, D model width.
"""

from __future__ import annotations

from typing import Any, Callable

from torch import Tensor, nn

from posenc.models.attention import MultiHeadAttention
from posenc.positions.base import AttentionHook, NullHook


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.drop = nn.Dropout(dropout)
        for lin in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.drop(self.act(self.fc1(x))))


class Residual(nn.Module):
    """x + dropout(f(LN(x))) for pre-LN, LN(x + dropout(f(x))) for post-LN."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm, self.drop, self.pre_norm = nn.LayerNorm(d_model), nn.Dropout(dropout), pre_norm

    def forward(self, x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return x + self.drop(fn(self.norm(x)))
        return self.norm(x + self.drop(fn(x)))


def attach_hook(layer: nn.Module, hook: AttentionHook) -> None:
    """Give ``layer`` its self-attention hook at construction (as torchtune injects its position
    embeddings). The stack's attention method owns the hook's parameters (one table per stack for
    T5, one per layer for Shaw), so the layer keeps a plain reference, not a submodule: parameter
    names and checkpoints stay as they were."""
    object.__setattr__(layer, "hook", hook)


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward: the encoder's layer, and (causal mask, optional KV cache)
    the decoder-only LM's."""

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, attn_dropout: float, pre_norm: bool,
                 activation: str = "relu", hook: AttentionHook | None = None) -> None:
        super().__init__()
        attach_hook(self, hook if hook is not None else NullHook())
        self.self_attn = MultiHeadAttention(d_model, heads, attn_dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.res1, self.res2 = Residual(d_model, dropout, pre_norm), Residual(d_model, dropout, pre_norm)

    def forward(self, x: Tensor, allowed: Tensor, ctx: Any, cache: dict[str, Tensor] | None = None) -> Tensor:
        """x ``(B, Lq, D)``, allowed ``(B, 1, Lq, Lk)``, the stack's position context → ``(B, Lq, D)``;
        ``cache`` (incremental decoding) gets the new keys/values."""
        x = self.res1(x, lambda h: self.self_attn(h, h, allowed, self.hook, ctx, cache))
        return self.res2(x, self.ff)


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, attn_dropout: float, pre_norm: bool,
                 activation: str = "relu", hook: AttentionHook | None = None) -> None:
        super().__init__()
        attach_hook(self, hook if hook is not None else NullHook())
        self.self_attn = MultiHeadAttention(d_model, heads, attn_dropout)
        self.cross_attn = MultiHeadAttention(d_model, heads, attn_dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.res = nn.ModuleList(Residual(d_model, dropout, pre_norm) for _ in range(3))

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        self_allowed: Tensor,
        cross_allowed: Tensor,
        ctx: Any,
        cache: dict[str, dict[str, Tensor]] | None = None,
    ) -> Tensor:
        """x ``(B, L, D)``; memory ``(B, S, D)`` (None when ``cache['cross']`` holds its keys)."""
        self_cache = cache["self"] if cache is not None else None
        cross_cache = cache["cross"] if cache is not None else None
        x = self.res[0](x, lambda h: self.self_attn(h, h, self_allowed, self.hook, ctx, self_cache))
        x = self.res[1](x, lambda h: self.cross_attn(h, memory, cross_allowed, cache=cross_cache))
        return self.res[2](x, self.ff)
