"""Multi-head attention with position hooks and a key/value cache.

Shape legend: B batch, Lq/Lk query/key length, H heads, D model width, Dh = D/H.

Paths (chosen per call, all numerically equal to the textbook definition):
* no hook, or a hook with a score term and/or a bias only → fused ``scaled_dot_product_attention``;
  the score term (Shaw's a^K, Eq. 5 first split, divided by √Dh) and the bias (ALiBi, T5, FIRE: a
  term of the scaled logits) enter as an additive float mask;
* a hook with a value term (Shaw's a^V) or a logits hook (CoPE: it reads q, k and the logits) →
  explicit softmax, since the value term needs α_ij and the logits hook the logits.
  The default ("fast") explicit path scales q before the products (so the score term comes out
  scaled), adds the score term and the mask in place into the fresh logits, and adds the value term
  in place into α·V, so only α (B, H, Lq, Lk) is kept for backward (the textbook order of
  operations, the reference of the tests, is ``tests/helpers/reference_attention.py``; the Shaw
  benchmark's is ``posenc/bench/reference.py``);
* a hook may supply its own attention for a call (``AttentionHook.attend``): Shaw does on CUDA,
  through FlexAttention without any (Lq, Lk) tensor kept for backward (``positions/shaw_flex.py``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.positions.base import AttentionHook, NullHook, PositionContext

#: A layer's hook: any method family (its context type is the stack's business).
Hook = AttentionHook[Any]

#: Hook used when a caller passes none (cross-attention, plain encoders).
NULL_HOOK = NullHook()


def avoid_cudnn_attention() -> None:
    """Keep SDPA off the cuDNN kernels. PyTorch 2.11's cuDNN SDPA backward returns NaN in dQ when
    an explicit mask is given and a row's log-sum-exp is below about -88.7 (pytorch/pytorch#196678);
    posenc always passes a mask (padding, causality), and bf16 LM training on an H100 hit NaN
    gradients at the same updates for every position method. Flash, memory-efficient and math
    kernels remain. Called when an attention module is built; nothing happens without CUDA."""
    if torch.cuda.is_available() and torch.backends.cuda.cudnn_sdp_enabled():
        torch.backends.cuda.enable_cudnn_sdp(False)


def may_attend_mask(key_mask: Tensor, lq: int, causal: bool, offset: int = 0) -> Tensor:
    """The "may attend" mask of key padding and causality.

    Args:
        key_mask: ``(B, Lk)``, True at real keys.
        lq: query positions Lq.
        causal: query i may attend to keys up to its own absolute index only.
        offset: the absolute index of the first query (incremental decoding).

    Returns:
        Bool ``(B, 1, Lq, Lk)`` (``(B, 1, 1, Lk)`` when not causal, broadcast over the queries).
    """
    allowed = key_mask[:, None, None, :]
    if causal:
        lk = key_mask.shape[1]
        q_idx = torch.arange(lq, device=key_mask.device)[:, None] + offset
        k_idx = torch.arange(lk, device=key_mask.device)[None, :]
        allowed = allowed & (k_idx <= q_idx)
    return allowed


def _bias(hook: Any, ctx: PositionContext | None) -> Tensor:
    """The hook's bias for the scaled logits ``(B, H, Lq, Lk)``, computed once per stack call when
    the layers share the hook (:meth:`PositionContext.once`)."""
    return hook.bias(ctx) if ctx is None else ctx.once(hook, lambda: hook.bias(ctx))


class KVCache:
    """Static self-attention cache for incremental decoding (no ``torch.cat`` per step).

    Keys/values ``(N, H, T_max, Dh)`` are allocated at the first :meth:`append` (with the dtype and
    device of the first keys, so bf16 autocast gives a bf16 cache) and written in place; ``length``
    positions are filled. Beam reordering selects rows of the filled prefix in place.

    Args:
        max_len: T_max, the positions the cache holds.
        at: a device step counter ``(1,)`` long for fixed shapes (CUDA graphs): :meth:`append` then
            writes at index ``at`` and returns the whole buffers (the caller masks slots > ``at``);
            None: the cache tracks ``length`` on the host.

    Raises:
        ValueError: ``max_len`` below 1.
    """

    def __init__(self, max_len: int, at: Tensor | None = None) -> None:
        if max_len < 1:
            raise ValueError(f"KVCache needs max_len >= 1, got {max_len}")
        self.max_len, self.length, self.at = max_len, 0, at
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write new keys and values at ``length`` (at ``at`` with fixed shapes).

        Args:
            k: new keys ``(N, H, Lnew, Dh)``.
            v: new values ``(N, H, Lnew, Dh)``.

        Returns:
            Views of all keys and values ``(N, H, length, Dh)`` (the whole buffers ``(N, H, T_max, Dh)``
            with fixed shapes).

        Raises:
            ValueError: more than ``max_len`` positions.
        """
        if self.k is None or self.v is None:
            n, h, _, dh = k.shape
            self.k = k.new_zeros(n, h, self.max_len, dh)
            self.v = v.new_zeros(n, h, self.max_len, v.shape[-1])
        if self.at is not None:  # fixed shapes: no host-side length
            self.k.index_copy_(2, self.at, k)
            self.v.index_copy_(2, self.at, v)
            return self.k, self.v
        end = self.length + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KVCache is full: {end} positions > max_len {self.max_len}")
        self.k[:, :, self.length : end] = k
        self.v[:, :, self.length : end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def reorder(self, index: Tensor) -> KVCache:
        """Select rows of the cache (beam reordering).

        Args:
            index: long row indices ``(N',)``.

        Returns:
            This cache, reordered in place, when ``N' = N``; else a new cache of those rows.
        """
        if self.k is None or self.v is None:
            return self
        n = self.max_len if self.at is not None else self.length
        if index.shape[0] == self.k.shape[0]:
            self.k[:, :, :n] = self.k[:, :, :n].index_select(0, index)
            self.v[:, :, :n] = self.v[:, :, :n].index_select(0, index)
            return self
        out = KVCache(self.max_len, self.at)
        out.k, out.v, out.length = self.k.index_select(0, index), self.v.index_select(0, index), n
        return out


def append_kv(cache: dict[str, Tensor] | KVCache, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """New keys/values ``(B, H, Lnew, Dh)`` appended to ``cache``; returns all of them ``(B, H, L, Dh)``.

    Two kinds, kept apart because each has what the other lacks: a dict (``k``, ``v``; empty at first)
    grows by concatenation, so it needs no horizon (``init_state`` of the seq2seq model, the LM's
    without one), and beam search's row selection makes new tensors (an earlier state stays valid); a
    :class:`KVCache` needs ``max_len`` but is written in place with fixed shapes (CUDA graphs). The
    keys and values are the same either way (tests/decoding/test_static_search.py).

    Args:
        cache: a dict (``k``, ``v``; empty at first) or a :class:`KVCache`.
        k: new keys ``(B, H, Lnew, Dh)``.
        v: new values ``(B, H, Lnew, Dh)``.

    Returns:
        All keys and values ``(B, H, L, Dh)``.
    """
    if isinstance(cache, KVCache):
        return cache.append(k, v)
    if "k" in cache:
        k, v = torch.cat((cache["k"], k), 2), torch.cat((cache["v"], v), 2)
    cache["k"], cache["v"] = k, v
    return k, v


class HookSlot:
    """A non-owning reference from an attention module to its position hook. The stack's attention
    method owns the hook's parameters (one T5 table per stack, one Shaw table per layer), so the
    module must not register the hook as a submodule: parameter names and checkpoints do not depend on it.

    Args:
        hook: the layer's position hook.
    """

    __slots__ = ("hook",)

    def __init__(self, hook: Hook) -> None:
        self.hook = hook


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention with the layer's position hook (see the module's paths).

    Args:
        d_model: model width D.
        num_heads: heads H (D must be divisible by H).
        dropout: attention dropout probability (training only).
        hook: the layer's position hook, given once at construction (as torchtune passes
            ``pos_embeddings``); None: no position term (cross-attention, plain encoders).

    Raises:
        ValueError: D not divisible by H.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, hook: Hook | None = None) -> None:
        super().__init__()
        avoid_cudnn_attention()
        self.slot = HookSlot(NULL_HOOK if hook is None else hook)
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {num_heads}")
        self.h, self.dh = num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def _split(self, x: Tensor) -> Tensor:
        """(B, L, D) → (B, H, L, Dh)."""
        b, length, _ = x.shape
        return x.view(b, length, self.h, self.dh).transpose(1, 2)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``x``, split into heads (no position transform).

        Args:
            x: ``(B, Lk, D)``.

        Returns:
            Keys and values, each ``(B, H, Lk, Dh)``.
        """
        return self._split(self.k_proj(x)), self._split(self.v_proj(x))

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None,
        allowed: Tensor,
        ctx: PositionContext | None = None,
        cache: dict[str, Tensor] | KVCache | None = None,
    ) -> Tensor:
        """Attend from ``query`` to ``key_value`` (or to the cached keys and values).

        Args:
            query: ``(B, Lq, D)``.
            key_value: ``(B, Lk, D)`` (the new positions only when ``cache`` holds earlier ones), or
                None: the keys and values of ``cache`` as they are (the cross-attention of a decoding step).
            allowed: bool ``(B, 1, Lq, Lk)`` (broadcastable), True where a query may attend to a key.
            ctx: the stack's position context for the module's hook (None: no method).
            cache: a dict or :class:`KVCache`; new keys and values are appended to it (:func:`append_kv`).

        Returns:
            The attention output ``(B, Lq, D)``.
        """
        hook = self.hook
        q = self._split(self.q_proj(query))
        if hook.has_transform:
            q = hook.transform_q(q, ctx)
        if key_value is not None:
            k, v = self.project_kv(key_value)
            if hook.has_transform:  # rotate new keys before caching (RoPE)
                k = hook.transform_k(k, ctx)
            if cache is not None:
                k, v = append_kv(cache, k, v)
        else:
            k, v = cache["k"], cache["v"]
        out = self._attend(q, k, v, allowed, hook, ctx)
        b, _, lq, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, lq, self.h * self.dh))

    @property
    def hook(self) -> Hook:
        """The position hook given at construction (:class:`NullHook` when none)."""
        return self.slot.hook

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, hook: Hook, ctx: PositionContext | None
    ) -> Tensor:
        p = self.dropout if self.training else 0.0
        own = hook.attend(q, k, v, allowed, ctx, p)  # a hook's fused path (Shaw: FlexAttention on CUDA)
        if own is not None:
            return own
        if hook.has_value or hook.has_logits:
            return self._explicit(q, k, v, allowed, hook, ctx, p)
        mask: Tensor = allowed
        if hook.has_score or hook.has_bias:  # one additive float mask for the fused kernel
            extra = hook.score(q, ctx) / math.sqrt(self.dh) if hook.has_score else None  # Shaw a^K (Eq. 5)
            if hook.has_bias:  # ALiBi, T5, FIRE: a bias for the scaled logits
                bias = _bias(hook, ctx).to(q.dtype)
                extra = bias if extra is None else extra + bias
            mask = extra.masked_fill(~allowed, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)

    def _explicit(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, hook: Hook, ctx: PositionContext | None,
                  p: float) -> Tensor:
        """Explicit softmax (a value term needs α_ij; a logits hook rewrites the logits) ``(B, H, Lq, Dh)``."""
        qs = q * (1.0 / math.sqrt(self.dh))  # (B, H, Lq, Dh): scale once, the score term is linear in q
        logits = torch.matmul(qs, k.transpose(-1, -2))  # fresh (B, H, Lq, Lk): safe to update in place
        if hook.has_score:
            logits.add_(hook.score(qs, ctx))
        if hook.has_bias:
            logits.add_(_bias(hook, ctx).to(logits.dtype))
        logits.masked_fill_(~allowed, float("-inf"))
        if hook.has_logits:  # CoPE: sees q (unscaled), k and the scaled, masked logits
            logits = hook.logits(q, k, logits, ctx)
        attn = F.dropout(torch.softmax(logits, dim=-1), p, self.training)
        out = torch.matmul(attn, v)
        return out.add_(hook.value(attn, ctx)) if hook.has_value else out
