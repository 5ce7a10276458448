"""Encoder and decoder layers, post-LN (Vaswani et al.) or pre-LN.

Shape legend: B batch, L length, S source length, D model width, H heads, Dh head width.

Both layers are called the same way by :meth:`posenc.models.transformer.Stack.run`,
``layer(x, allowed, ctx, cache, cross)``; the decoder layer reads ``cross`` (the memory and its
mask), the encoder layer has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import Tensor, nn

from posenc.models.attention import Hook, KVCache, MultiHeadAttention
from posenc.positions.base import PositionContext

#: A self-attention cache: keys/values ``(B, H, L, Dh)`` grown by concatenation (a dict, empty at
#: first) or preallocated and written in place (:class:`KVCache`).
SelfCache = dict[str, Tensor] | KVCache


class BeamInvariant(dict):
    """A state entry equal on every row of a sentence's beam group (the cross-attention keys and
    values): :func:`~posenc.decoding.search.reorder_state` with ``within_groups=True`` leaves it as it is."""


@dataclass
class DecoderLayerCache:
    """One decoder layer's decoding cache: self-attention keys/values (grown each step) and the
    cross-attention keys/values ``k``, ``v`` ``(B, H, S, Dh)`` of the memory (computed once)."""

    self_attn: SelfCache
    cross_attn: BeamInvariant


@dataclass
class CrossInputs:
    """What decoder layers' cross-attention reads: ``memory (B, S, D)`` (None in incremental
    decoding, where :class:`DecoderLayerCache` holds its keys/values) and ``allowed (B, 1, Lq, S)``."""

    memory: Tensor | None
    allowed: Tensor


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


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward: the encoder's layer, and (causal mask, optional KV cache)
    the decoder-only LM's."""

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, attn_dropout: float, pre_norm: bool,
                 activation: str = "relu", hook: Hook | None = None) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, attn_dropout, hook)  # its hook, once
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.res1, self.res2 = Residual(d_model, dropout, pre_norm), Residual(d_model, dropout, pre_norm)

    @property
    def hook(self) -> Hook:
        """The self-attention's position hook (given at construction)."""
        return self.self_attn.hook

    def forward(self, x: Tensor, allowed: Tensor, ctx: PositionContext | None, cache: SelfCache | None = None,
                cross: CrossInputs | None = None) -> Tensor:
        """x ``(B, Lq, D)``, allowed ``(B, 1, Lq, Lk)``, the stack's position context → ``(B, Lq, D)``;
        ``cache`` (incremental decoding) gets the new keys/values; ``cross`` must be None."""
        assert cross is None, "an encoder layer has no cross-attention"
        x = self.res1(x, lambda h: self.self_attn(h, h, allowed, ctx=ctx, cache=cache))
        return self.res2(x, self.ff)


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, attn_dropout: float, pre_norm: bool,
                 activation: str = "relu", hook: Hook | None = None) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, attn_dropout, hook)  # its hook, once
        self.cross_attn = MultiHeadAttention(d_model, heads, attn_dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.res = nn.ModuleList(Residual(d_model, dropout, pre_norm) for _ in range(3))

    @property
    def hook(self) -> Hook:
        """The self-attention's position hook (given at construction)."""
        return self.self_attn.hook

    def forward(self, x: Tensor, allowed: Tensor, ctx: PositionContext | None, cache: DecoderLayerCache | None = None,
                cross: CrossInputs | None = None) -> Tensor:
        """x ``(B, L, D)``, self-attention ``allowed (B, 1, L, Lk)`` → ``(B, L, D)``; ``cross`` is required."""
        assert cross is not None, "a decoder layer needs the memory (cross)"
        self_cache = cache.self_attn if cache is not None else None
        cross_cache = cache.cross_attn if cache is not None else None
        x = self.res[0](x, lambda h: self.self_attn(h, h, allowed, ctx=ctx, cache=self_cache))
        x = self.res[1](x, lambda h: self.cross_attn(h, cross.memory, cross.allowed, cache=cross_cache))
        return self.res[2](x, self.ff)
