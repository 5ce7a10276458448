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
    """Positions 0, 1, ..., L-1 for every row of ``mask``.

    Sequences are right-padded, so the position of a real token is its index.

    Args:
        mask: ``(B, L)``, True at real tokens (only its shape and device are read).

    Returns:
        Float positions ``(B, L)``.
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
        """Add (or otherwise apply) the method's position information to token embeddings.

        Args:
            x: token embeddings ``(B, L, D)``.
            positions: float positions ``(B, L)`` (possibly rewritten by an augmentation).
            mask: ``(B, L)``, True at real tokens.
            state: the method's own dict: incremental decoding's (``x`` then holds the new steps
                only) or the ViT's ``{"grid": (gh, gw)}``; None for a full pass.

        Returns:
            Embeddings with positions ``(B, L, D)``.
        """
        raise NotImplementedError

    def ct2_table(self, rows: int, offset: int) -> Tensor | None:
        """The CTranslate2 position table: added to the scaled embeddings, as :meth:`forward` adds its term.

        Args:
            rows: how many positions the table holds.
            offset: the first position (row ``i`` is position ``offset + i``).

        Returns:
            The table ``(rows, D)``, or None when the method adds nothing.

        Raises:
            NotImplementedError: the method has no exact CTranslate2 form (``ct2_refusal`` says why).
        """
        raise NotImplementedError(f"{type(self).__name__} declares no CTranslate2 table: {self.ct2_refusal}")

    def prefetch(self, x: Tensor, positions: Tensor, mask: Tensor) -> None:
        """Hint that ``forward(x, positions, mask)`` (full pass, same ``x``) will follow; a method
        with a long sequential pass may start it early (the GRU, on a side CUDA stream). No-op here.

        Args:
            x: token embeddings ``(B, L, D)``, as the coming :meth:`forward` gets them.
            positions: float positions ``(B, L)``.
            mask: ``(B, L)``, True at real tokens.
        """


class PositionContext:
    """Base of the per-stack contexts of attention-level methods: computed once per stack call by
    :meth:`AttentionPosition.context` from query/key positions, read by every layer's hook."""

    def once(self, owner: object, make: Callable[[], Tensor]) -> Tensor:
        """``make()`` computed once per context for ``owner``: a hook shared by the layers of a stack
        (T5's table, FIRE's MLP) gives its bias once per stack call, not once per layer.

        Args:
            owner: the object the result belongs to (keyed by identity).
            make: computes the tensor on the first call for ``owner``.

        Returns:
            ``make()``'s result, the same tensor on every later call for ``owner``.
        """
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
        """The additive term of the scaled logits q·k/sqrt(Dh) (added before the mask).

        Args:
            ctx: the stack's context (from :meth:`AttentionPosition.context`).

        Returns:
            The bias ``(B|1, H, Lq, Lk)``.
        """
        raise NotImplementedError

    def logits(self, q: Tensor, k: Tensor, logits: Tensor, ctx: C) -> Tensor:
        """Rewrite the scaled, masked logits with q and k in hand.

        Args:
            q: queries ``(B, H, Lq, Dh)``, unscaled, after any transform.
            k: keys ``(B, H, Lk, Dh)``: every key this call attends to, the KV cache included.
            logits: the scaled logits ``(B, H, Lq, Lk)``, −inf where attention is not allowed.
            ctx: the stack's context.

        Returns:
            The logits the softmax reads, ``(B, H, Lq, Lk)`` (may be ``logits`` changed in place).
        """
        raise NotImplementedError

    def transform_q(self, q: Tensor, ctx: C) -> Tensor:
        """Transform the queries before the products (identity unless ``has_transform``).

        Args:
            q: queries ``(B, H, Lq, Dh)``.
            ctx: the stack's context.

        Returns:
            The transformed queries ``(B, H, Lq, Dh)``.
        """
        return q

    def transform_k(self, k: Tensor, ctx: C) -> Tensor:
        """Transform the new keys before they enter the products (and the KV cache).

        Args:
            k: new keys ``(B, H, Lnew, Dh)``, those of the last Lnew key positions.
            ctx: the stack's context.

        Returns:
            The transformed keys ``(B, H, Lnew, Dh)``.
        """
        return k

    def attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, ctx: C, dropout_p: float) -> Tensor | None:
        """The hook's own attention for this call (e.g. Shaw through FlexAttention on CUDA).

        Args:
            q: queries ``(B, H, Lq, Dh)``, unscaled.
            k: keys ``(B, H, Lk, Dh)``.
            v: values ``(B, H, Lk, Dh)``.
            allowed: bool, broadcastable to ``(B, 1, Lq, Lk)``, True where a query may attend to a key.
            ctx: the stack's context.
            dropout_p: attention dropout probability (0 in eval).

        Returns:
            The attention output ``(B, H, Lq, Dh)``, or None: the layer then runs its own paths with
            ``score``/``value``.
        """
        return None

    def score(self, q: Tensor, ctx: C) -> Tensor:
        """The additive term of the unscaled logits, linear in q.

        Args:
            q: queries ``(B, H, Lq, Dh)``, unscaled.
            ctx: the stack's context.

        Returns:
            The score term ``(B, H, Lq, Lk)``.
        """
        raise NotImplementedError

    def value(self, attn: Tensor, ctx: C) -> Tensor:
        """The additive term of the attention output, read from the attention weights.

        Args:
            attn: attention weights ``(B, H, Lq, Lk)`` (after softmax and dropout).
            ctx: the stack's context.

        Returns:
            The value term ``(B, H, Lq, Dh)``.
        """
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
        """The CTranslate2 form of the method, as spec keywords.

        Returns:
            Keywords of CTranslate2's ``TransformerEncoderSpec``/``TransformerDecoderSpec`` that switch
            the method on in every self-attention of both stacks (e.g. ``relative_position=True``).

        Raises:
            NotImplementedError: the method has no exact CTranslate2 form (``ct2_refusal`` says why).
        """
        raise NotImplementedError(f"{type(self).__name__} declares no CTranslate2 form: {self.ct2_refusal}")

    def ct2_layer(self, layer: int) -> dict[str, Tensor | int]:
        """The method's CTranslate2 weights of one self-attention layer. None here (the method is all
        in :meth:`ct2_spec`).

        Args:
            layer: the layer index in its stack.

        Returns:
            Self-attention spec attributes (CTranslate2's names) → values: tables as tensors, integers
            as ints.
        """
        return {}

    def context(self, q_positions: Tensor, k_positions: Tensor) -> C | None:
        """The context shared by every layer of the stack, computed once per stack call.

        Args:
            q_positions: float query positions ``(B, Lq)``.
            k_positions: float key positions ``(B, Lk)``.

        Returns:
            The method's context, or None when its hooks read none.
        """
        raise NotImplementedError

    def hook(self, layer: int) -> AttentionHook[C]:
        """The hook of one self-attention layer (a method may share one hook across layers).

        Args:
            layer: the layer index in the stack, 0-based.

        Returns:
            That layer's hook.
        """
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
        """Augment the positions of one sequence (vision, speech).

        Args:
            positions: float positions ``(B, L)`` (``(B, L, 2)`` for 2-D methods).
            mask: ``(B, L)``, True at real tokens.

        Returns:
            The augmented positions, same shape.
        """
        raise NotImplementedError

    def pair(
        self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Augment the positions of a source/target pair (translation), with shared draws where the
        method ties the two sides.

        Args:
            src_pos: float source positions ``(B, Ls)``.
            src_mask: ``(B, Ls)``, True at real source tokens.
            tgt_pos: float target positions ``(B, Lt)``.
            tgt_mask: ``(B, Lt)``, True at real target tokens.

        Returns:
            The augmented source ``(B, Ls)`` and target ``(B, Lt)`` positions.
        """
        raise NotImplementedError

    #: True when eval positions are drawn for a whole sequence (randomized positions, Ruoss et al.
    #: 2023), so step-by-step decoding must read them from :meth:`decode_positions`.
    needs_decode_horizon: bool = False
    #: True when the augmentation also changes positions in eval mode (randomized positions sampled
    #: at test time, as published); wrappers that skip augmentations in eval must still apply it.
    samples_in_eval: bool = False

    def eval_target(self, tgt_pos: Tensor, mask: Tensor | None = None) -> Tensor:
        """The inference transform of causal target positions (a full pass).

        Args:
            tgt_pos: float target positions ``(B, Lt)``.
            mask: ``(B, Lt)``, True at real tokens, or None when every position is real.

        Returns:
            The eval positions ``(B, Lt)``.
        """
        raise NotImplementedError

    def decode_positions(self, horizon: int, device: torch.device | str) -> Tensor:
        """Eval positions of causal target steps 0..horizon−1 (incremental decoding reads them step by step).

        Args:
            horizon: how many target steps.
            device: where the positions are made.

        Returns:
            Float positions ``(1, horizon)``.
        """
        return self.eval_target(torch.arange(horizon, device=device, dtype=torch.float32)[None])


class NullAugmentation(Augmentation):
    """No augmentation: positions pass through unchanged, in training and in eval (the models ask
    the augmentation for positions without branching on whether there is one)."""

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        """The positions unchanged.

        Args:
            positions: float positions ``(B, L)``.
            mask: ``(B, L)``, True at real tokens (not read).

        Returns:
            ``positions`` itself.
        """
        return positions

    def pair(
        self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Both sides' positions unchanged.

        Args:
            src_pos: float source positions ``(B, Ls)``.
            src_mask: ``(B, Ls)`` (not read).
            tgt_pos: float target positions ``(B, Lt)``.
            tgt_mask: ``(B, Lt)`` (not read).

        Returns:
            ``src_pos`` and ``tgt_pos`` themselves.
        """
        return src_pos, tgt_pos

    def eval_target(self, tgt_pos: Tensor, mask: Tensor | None = None) -> Tensor:
        """The target positions unchanged.

        Args:
            tgt_pos: float target positions ``(B, Lt)``.
            mask: ``(B, Lt)`` or None (not read).

        Returns:
            ``tgt_pos`` itself.
        """
        return tgt_pos


class NullAttention(AttentionPosition[Any]):
    """Attention method of stacks without one: context ``None``, every layer gets a :class:`NullHook`."""

    def __init__(self) -> None:
        super().__init__()
        self.null = NullHook()

    def ct2_spec(self) -> dict[str, Any]:
        """CTranslate2's plain attention.

        Returns:
            No keywords (an empty dict).
        """
        return {}

    def context(self, q_positions: Tensor, k_positions: Tensor) -> None:
        """No context: the hooks read none.

        Args:
            q_positions: float query positions ``(B, Lq)`` (not read).
            k_positions: float key positions ``(B, Lk)`` (not read).
        """
        return None

    def hook(self, layer: int) -> NullHook:
        """The one :class:`NullHook`, shared by every layer.

        Args:
            layer: the layer index (not read).

        Returns:
            The shared null hook.
        """
        return self.null
