"""The position interface: input-layer methods, attention-level methods, augmentations.

Shape legend: B batch, L sequence length, Lq/Lk query/key length, H heads, D model width,
Dh head width, R number of relative-distance buckets.

Three families, each chosen by name from a registry (``posenc.positions.registry``):

* :class:`InputPosition` maps token embeddings ``x (B, L, D)`` and an explicit float positions
  tensor ``(B, L)`` to embeddings ``(B, L, D)``. Incremental decoding passes a ``state`` dict in
  which a method keeps what it needs between steps (the GRU keeps its hidden state).
* :class:`AttentionPosition` builds a context once per stack from query/key positions and owns
  one :class:`AttentionHook` per self-attention layer, which adds a score term and/or a value
  term to that layer's attention. Each method family has its own typed context, a
  :class:`PositionContext` subclass ``C`` (RoPE: angles; ALiBi: distances; T5: buckets; Shaw:
  clipped relative indices), and its position method and hooks are ``AttentionPosition[C]`` and
  ``AttentionHook[C]``; the layers pass it through as ``PositionContext | None`` (None: no method).
* :class:`Augmentation` is a sampler over the positions tensor (SHAPE, CAPE, randomized). In eval
  mode it applies its inference transform: deterministic for SHAPE and CAPE; randomized positions
  are sampled at evaluation too, as published (Ruoss et al. 2023), from a seeded eval generator.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

import torch
from torch import Tensor, nn


def default_positions(mask: Tensor) -> Tensor:
    """Positions 0, 1, ..., L-1 for every row of ``mask (B, L)``, as float ``(B, L)``.

    Sequences are right-padded, so the position of a real token is its index.
    """
    b, length = mask.shape
    return torch.arange(length, device=mask.device, dtype=torch.float32).expand(b, length)


class InputPosition(nn.Module):
    """Input-layer position method: ``x (B, L, D), positions (B, L) -> (B, L, D)``."""

    #: True when the method reads the positions tensor (absolute methods), so that
    #: augmentations (which only change positions) have an effect.
    uses_positions: bool = False
    #: False when its training pass cannot be traced whole (a graph break or data-dependent shape);
    #: ``capture_blocker`` says why, in one line (:func:`posenc.training.compiled.capture_blockers`).
    capturable: bool = True
    capture_blocker: str = ""
    #: Why the method has no exact CTranslate2 form, in a few words (``posenc export`` refuses with
    #: it), or None when :meth:`ct2_table` gives it. Every registered method declares one of the two.
    ct2_refusal: str | None = None

    def forward(
        self, x: Tensor, positions: Tensor, mask: Tensor, state: dict[str, Any] | None = None
    ) -> Tensor:
        raise NotImplementedError

    def ct2_table(self, rows: int, offset: int) -> Tensor | None:
        """The CTranslate2 position table ``(rows, D)`` of positions ``offset … offset+rows−1`` (added
        to the scaled embeddings, as :meth:`forward` adds its term), or None when the method adds nothing."""
        raise NotImplementedError(f"{type(self).__name__} declares no CTranslate2 table: {self.ct2_refusal}")

    def prefetch(self, x: Tensor, positions: Tensor, mask: Tensor) -> None:
        """Hint that ``forward(x, positions, mask)`` (full pass, same ``x``) will follow; a method
        with a long sequential pass may start it now (the GRU, on a side CUDA stream). No-op here."""


class PositionContext:
    """Base of the per-stack contexts of attention-level methods: computed once per stack call by
    :meth:`AttentionPosition.context` from query/key positions, read by every layer's hook."""

    def once(self, owner: object, make: Callable[[], Tensor]) -> Tensor:
        """``make()`` computed once per context for ``owner``: a hook shared by the layers of a stack
        (T5's table, FIRE's MLP) gives its bias once per stack call, not once per layer."""
        memo = self.__dict__.setdefault("_once", {})
        if id(owner) not in memo:
            memo[id(owner)] = make()
        return memo[id(owner)]


#: The context type of one method family.
C = TypeVar("C", bound=PositionContext)


class AttentionHook(nn.Module, Generic[C]):
    """Per-layer hook into scaled dot-product attention, given to the layer's attention module once,
    at construction (its parameters stay with the method).

    Five optional parts, each declared by its flag (all False here: a hook sets the flags of the
    parts it has, and the layer calls only those):

    * ``score(q, ctx)``: an additive term for the *unscaled* logits ``(B, H, Lq, Lk)``, linear in q
      (Shaw et al. 2018, Eq. 5 split; the layer divides it by sqrt(Dh) with the logits);
    * ``bias(ctx)``: an additive term ``(B|1, H, Lq, Lk)`` for the *scaled* logits that does not read
      q or k (ALiBi, T5, FIRE);
    * ``value(attn, ctx)``: an additive term for the attention output ``(B, H, Lq, Dh)`` (Shaw a^V);
    * ``transform_q``/``transform_k``: q and k transformed before the products (RoPE, xPos);
    * ``logits(q, k, logits, ctx)``: rewrites the scaled, masked logits with q and k in hand (CoPE).

    Without a value term or a logits hook the layer uses fused attention, the score term and the bias
    passed as an additive float mask.
    """

    #: True when the hook adds :meth:`score` to the unscaled logits (Shaw a^K).
    has_score: bool = False
    #: True when the hook adds :meth:`value` to the attention output (Shaw a^V).
    has_value: bool = False
    #: True when the hook rotates/transforms q and k before the products (RoPE).
    has_transform: bool = False
    #: True when the hook adds :meth:`bias` to the scaled logits.
    has_bias: bool = False
    #: True when the hook rewrites the logits (:meth:`logits`); the layer then runs an explicit softmax.
    has_logits: bool = False

    def bias(self, ctx: C) -> Tensor:
        """``(B|1, H, Lq, Lk)`` added to the scaled logits q·k/sqrt(Dh) (before the mask)."""
        raise NotImplementedError

    def logits(self, q: Tensor, k: Tensor, logits: Tensor, ctx: C) -> Tensor:
        """q ``(B, H, Lq, Dh)`` (unscaled, after any transform), k ``(B, H, Lk, Dh)`` (every key this
        call attends to, the KV cache included) and the scaled logits ``(B, H, Lq, Lk)`` with −inf
        where attention is not allowed → the logits the softmax reads (same shape; may be in place)."""
        raise NotImplementedError

    def transform_q(self, q: Tensor, ctx: C) -> Tensor:
        """q ``(B, H, Lq, Dh)`` → transformed q (identity unless ``has_transform``)."""
        return q

    def transform_k(self, k: Tensor, ctx: C) -> Tensor:
        """New keys ``(B, H, Lnew, Dh)`` (the last Lnew key positions) → transformed keys."""
        return k

    def attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, ctx: C, dropout_p: float) -> Tensor | None:
        """The hook's own attention for this call ``(B, H, Lq, Dh)`` (e.g. Shaw through FlexAttention
        on CUDA), or None: the layer then runs its own paths with ``score``/``value``."""
        return None

    def score(self, q: Tensor, ctx: C) -> Tensor:
        raise NotImplementedError

    def value(self, attn: Tensor, ctx: C) -> Tensor:
        raise NotImplementedError


class NullHook(AttentionHook[Any]):
    """No position term (every flag False, as :class:`AttentionHook` declares them): attention runs
    the plain fused SDPA path (no ``None`` branches)."""


class AttentionPosition(nn.Module, Generic[C]):
    """Attention-level method for a stack of ``num_layers`` self-attention layers."""

    #: As :attr:`InputPosition.capturable` (with its one-line ``capture_blocker``).
    capturable: bool = True
    capture_blocker: str = ""
    #: As :attr:`InputPosition.ct2_refusal`: why no exact CTranslate2 form, or None when
    #: :meth:`ct2_spec` (and :meth:`ct2_layer`) give it; a method may set it per instance (per params).
    ct2_refusal: str | None = None

    def ct2_spec(self) -> dict[str, Any]:
        """Keywords of CTranslate2's ``TransformerEncoderSpec``/``TransformerDecoderSpec`` that switch
        the method on in every self-attention of both stacks (e.g. ``relative_position=True``)."""
        raise NotImplementedError(f"{type(self).__name__} declares no CTranslate2 form: {self.ct2_refusal}")

    def ct2_layer(self, layer: int) -> dict[str, Tensor | int]:
        """Self-attention spec attributes (CTranslate2's names) → values of layer ``layer``: tables as
        tensors, integers as ints. None here (the method is all in :meth:`ct2_spec`)."""
        return {}

    def context(self, q_positions: Tensor, k_positions: Tensor) -> C | None:
        """Context shared by every layer of the stack, from positions ``(B, Lq)``, ``(B, Lk)``."""
        raise NotImplementedError

    def hook(self, layer: int) -> AttentionHook[C]:
        raise NotImplementedError


class Augmentation(nn.Module):
    """Sampler over positions; random in training, its inference transform in eval (reproducible).

    ``pair`` handles a source/target pair (translation); ``forward`` a single sequence
    (vision, speech). ``eval_target`` is the eval transform of causal target positions (a full
    pass; ``mask``, when given, marks real tokens); incremental decoding reads
    :meth:`decode_positions` of its horizon, one step at a time.
    """

    #: The positions it produces stay integers (SHAPE's integer shift k, Kiyono et al. 2021 §2.3;
    #: randomized: a subset of {0..L_max−1}, Ruoss et al. 2023), so they can index a learned table
    #: (posenc.hf checks this against a model family's position interface).
    integer_valued: bool = False
    #: Meaningful only over position ids a task gives (Abacus: digit places, separators 0, McLeish
    #: et al. 2024), not over token counts 0..L−1: posenc.hf, which counts tokens, refuses it.
    needs_task_ids: bool = False

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        raise NotImplementedError

    def pair(
        self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    #: True when eval positions are drawn for a whole sequence (randomized positions, Ruoss et al.
    #: 2023), so step-by-step decoding must read them from :meth:`decode_positions`.
    needs_decode_horizon: bool = False
    #: True when the augmentation also changes positions in eval mode (randomized positions sampled
    #: at test time, as published); wrappers that skip augmentations in eval must still apply it.
    samples_in_eval: bool = False

    def eval_target(self, tgt_pos: Tensor, mask: Tensor | None = None) -> Tensor:
        raise NotImplementedError

    def decode_positions(self, horizon: int, device: torch.device | str) -> Tensor:
        """Eval positions of causal target steps 0..horizon−1, ``(1, horizon)`` (incremental decoding)."""
        return self.eval_target(torch.arange(horizon, device=device, dtype=torch.float32)[None])


class NullAugmentation(Augmentation):
    """No augmentation: positions pass through unchanged, in training and in eval (the models ask
    the augmentation for positions without branching on whether there is one)."""

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        return positions

    def pair(
        self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        return src_pos, tgt_pos

    def eval_target(self, tgt_pos: Tensor, mask: Tensor | None = None) -> Tensor:
        return tgt_pos


class NullAttention(AttentionPosition[Any]):
    """Attention method of stacks without one: context ``None``, every layer gets a :class:`NullHook`."""

    def __init__(self) -> None:
        super().__init__()
        self.null = NullHook()

    def ct2_spec(self) -> dict[str, Any]:
        """No keywords: CTranslate2's plain attention."""
        return {}

    def context(self, q_positions: Tensor, k_positions: Tensor) -> None:
        return None

    def hook(self, layer: int) -> NullHook:
        return self.null
