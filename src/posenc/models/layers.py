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
    cross-attention keys/values ``k``, ``v`` ``(B, H, S, Dh)`` of the memory (computed once).

    Args:
        self_attn: the self-attention cache (a dict or :class:`KVCache`).
        cross_attn: the memory's cross-attention keys and values.
    """

    self_attn: SelfCache
    cross_attn: BeamInvariant


@dataclass
class CrossInputs:
    """What decoder layers' cross-attention reads.

    Args:
        memory: the encoder output ``(B, S, D)``, or None in incremental decoding, where
            :class:`DecoderLayerCache` holds its keys/values.
        allowed: bool ``(B, 1, Lq|1, S)``, True at real source positions.
    """

    memory: Tensor | None
    allowed: Tensor


class FeedForward(nn.Module):
    """The position-wise feed-forward block: fc2(dropout(act(fc1(x)))).

    Args:
        d_model: model width D.
        d_ff: hidden width.
        dropout: dropout after the activation.
        activation: ``relu`` or ``gelu``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.drop = nn.Dropout(dropout)
        for lin in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block at every position.

        Args:
            x: ``(B, L, D)``.

        Returns:
            ``(B, L, D)``.
        """
        return self.fc2(self.drop(self.act(self.fc1(x))))


class Residual(nn.Module):
    """x + dropout(f(LN(x))) for pre-LN, LN(x + dropout(f(x))) for post-LN.

    Args:
        d_model: model width D (the layer norm's).
        dropout: dropout of the branch f's output.
        pre_norm: pre-LN (else post-LN).
    """

    def __init__(self, d_model: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm, self.drop, self.pre_norm = nn.LayerNorm(d_model), nn.Dropout(dropout), pre_norm

    def forward(self, x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
        """One residual connection around ``fn``.

        Args:
            x: ``(B, L, D)``.
            fn: the branch (attention or feed-forward), ``(B, L, D)`` → ``(B, L, D)``.

        Returns:
            ``(B, L, D)``.
        """
        if self.pre_norm:
            return x + self.drop(fn(self.norm(x)))
        return self.norm(x + self.drop(fn(x)))


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward: the encoder's layer, and (causal mask, optional KV cache)
    the decoder-only LM's.

    Args:
        d_model: model width D.
        heads: attention heads.
        d_ff: feed-forward hidden width.
        dropout: dropout of the residual branches and feed-forward block.
        attn_dropout: dropout of the attention weights.
        pre_norm: pre-LN (else post-LN).
        activation: ``relu`` or ``gelu``.
        hook: the self-attention's position hook (None: no position term).
    """

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
        """One layer.

        Args:
            x: ``(B, Lq, D)``.
            allowed: bool ``(B, 1, Lq, Lk)`` (broadcastable), the self-attention mask.
            ctx: the stack's position context.
            cache: incremental decoding's self-attention cache; it gets the new keys/values.
            cross: must be None (the uniform layer call of :meth:`Stack.run`).

        Returns:
            ``(B, Lq, D)``.
        """
        assert cross is None, "an encoder layer has no cross-attention"
        x = self.res1(x, lambda h: self.self_attn(h, h, allowed, ctx=ctx, cache=cache))
        return self.res2(x, self.ff)


class DecoderLayer(nn.Module):
    """Self-attention + cross-attention to the memory + feed-forward.

    Args:
        d_model: model width D.
        heads: attention heads.
        d_ff: feed-forward hidden width.
        dropout: dropout of the residual branches and feed-forward block.
        attn_dropout: dropout of the attention weights.
        pre_norm: pre-LN (else post-LN).
        activation: ``relu`` or ``gelu``.
        hook: the self-attention's position hook (cross-attention has none).
    """

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
        """One layer.

        Args:
            x: ``(B, L, D)``.
            allowed: bool ``(B, 1, L, Lk)`` (broadcastable), the self-attention mask.
            ctx: the stack's position context.
            cache: incremental decoding's caches (self-attention grown, cross-attention fixed).
            cross: the memory and its mask (required).

        Returns:
            ``(B, L, D)``.
        """
        assert cross is not None, "a decoder layer needs the memory (cross)"
        self_cache = cache.self_attn if cache is not None else None
        cross_cache = cache.cross_attn if cache is not None else None
        x = self.res[0](x, lambda h: self.self_attn(h, h, allowed, ctx=ctx, cache=self_cache))
        x = self.res[1](x, lambda h: self.cross_attn(h, cross.memory, cross.allowed, cache=cross_cache))
        return self.res[2](x, self.ff)
