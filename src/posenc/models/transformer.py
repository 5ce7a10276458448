"""Encoder–decoder Transformer with pluggable position methods.

Shape legend: B batch, L length, S source length, T target length (T_max: the decoding horizon),
H heads, D model width, Dh head width, V vocabulary.

Positions are an explicit float tensor (B, L) per side. The input-layer method maps
embeddings → embeddings; the attention-level method builds a context once per stack and hands
each self-attention layer its hook; the augmentation (SHAPE, CAPE) rewrites the positions tensor
(randomly in training). :meth:`Stack.run` is the one loop over layers that every model uses
(encoder, decoder, decoder-only LM; full passes and incremental steps).

Incremental decoding keeps its per-step quantities in a small typed state object per model
(:mod:`posenc.models.decoding_state`: :class:`~posenc.models.decoding_state.Seq2SeqState`,
:class:`~posenc.models.decoding_state.LMState`) whose tensors all have the batch on dim 0, so beam
search reorders it with :func:`~posenc.decoding.search.reorder_state`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from posenc.models.attention import may_attend_mask
from posenc.models.config import ModelConfig, StackConfig
from posenc.models.decoding_state import Seq2SeqState
from posenc.models.layers import BeamInvariant, CrossInputs, DecoderLayer, EncoderLayer
from posenc.positions import Augmentation, build_attention, build_input
from posenc.positions.base import PositionContext

__all__ = ["BeamInvariant", "Decoder", "Embedding", "Encoder", "Stack"]


class Embedding(nn.Module):
    """Token embedding scaled by √D (Vaswani et al. §3.4).

    Args:
        vocab: vocabulary size V.
        d_model: model width D.
        pad_id: the padding token (its row starts at zero and gets no gradient).
    """

    def __init__(self, vocab: int, d_model: int, pad_id: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)
        with torch.no_grad():
            self.weight[pad_id].zero_()
        self.pad_id, self.scale = pad_id, math.sqrt(d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        """Embed tokens.

        Args:
            tokens: long ids ``(B, L)``.

        Returns:
            √D · E[tokens], ``(B, L, D)``.
        """
        return nn.functional.embedding(tokens, self.weight, self.pad_id) * self.scale


class Stack(nn.Module):
    """Input position layer + N layers (+ final LN for pre-LN): encoder, decoder and LM stacks.

    Args:
        spec: the stack's config (layers, sizes, position methods, causal, cross-attention).
    """

    def __init__(self, spec: StackConfig) -> None:
        super().__init__()
        d, pos = spec.d_model, spec.position
        self.input_pos = build_input(pos, d)
        self.attn_pos = build_attention(pos, d, spec.num_layers, spec.heads, spec.causal)
        layer_cls = DecoderLayer if spec.cross_attention else EncoderLayer
        self.layers = nn.ModuleList(
            layer_cls(d, spec.heads, spec.d_ff, spec.dropout, spec.attention_dropout, spec.norm == "pre",
                      spec.activation, hook=self.attn_pos.hook(i))  # each layer gets its hook once, at construction
            for i in range(spec.num_layers)
        )
        self.final_norm = nn.LayerNorm(d) if spec.norm == "pre" else nn.Identity()
        self.drop = nn.Dropout(spec.dropout)

    def context(self, q_pos: Tensor, k_pos: Tensor) -> PositionContext | None:
        """The attention method's per-call context, computed once per stack and passed to every layer.

        Args:
            q_pos: float query positions ``(B, Lq)``.
            k_pos: float key positions ``(B, Lk)``.

        Returns:
            The context, or None for the null method.
        """
        return self.attn_pos.context(q_pos, k_pos)

    def run(self, x: Tensor, q_pos: Tensor, mask: Tensor, allowed: Tensor, k_pos: Tensor | None = None,
            caches: Sequence[Any] | None = None, cross: CrossInputs | None = None,
            input_state: dict[str, Tensor] | None = None) -> Tensor:
        """The stack loop: input positions, then every layer with the stack's one position context.

        Args:
            x: embedded tokens ``(B, Lq, D)``.
            q_pos: their float positions ``(B, Lq)``.
            mask: ``(B, Lq)``, True at real tokens.
            allowed: bool ``(B, 1, Lq, Lk)`` (broadcastable), the self-attention mask.
            k_pos: float key positions ``(B, Lk)``; None: ``q_pos`` (a full pass).
            caches: one cache per layer (incremental decoding), or None.
            cross: the memory and its mask (decoder stacks).
            input_state: the input method's decoding state (incremental decoding), or None.

        Returns:
            ``(B, Lq, D)``.
        """
        h = self.drop(self.input_pos(x, q_pos, mask, input_state))
        ctx = self.context(q_pos, q_pos if k_pos is None else k_pos)
        for layer, cache in zip(self.layers, caches if caches is not None else [None] * len(self.layers)):
            h = layer(h, allowed, ctx, cache, cross)
        return self.final_norm(h)


class Encoder(Stack):
    """The bidirectional source stack of the seq2seq model.

    Args:
        cfg: the model config (its :meth:`~ModelConfig.encoder_stack`).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg.encoder_stack())

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor) -> Tensor:
        """Encode the source.

        Args:
            x: embedded source ``(B, S, D)``.
            positions: float positions ``(B, S)``.
            mask: ``(B, S)``, True at real tokens.

        Returns:
            The memory ``(B, S, D)``.
        """
        return self.run(x, positions, mask, may_attend_mask(mask, mask.shape[1], causal=False))


class Decoder(Stack):
    """The causal target stack of the seq2seq model, with cross-attention to the memory.

    Args:
        cfg: the model config (its :meth:`~ModelConfig.decoder_stack`).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg.decoder_stack())

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, memory: Tensor, memory_mask: Tensor) -> Tensor:
        """Teacher-forced pass.

        Args:
            x: embedded target ``(B, T, D)``.
            positions: float positions ``(B, T)``.
            mask: ``(B, T)``, True at real tokens.
            memory: the encoder output ``(B, S, D)``.
            memory_mask: ``(B, S)``, True at real source tokens.

        Returns:
            ``(B, T, D)``.
        """
        cross = CrossInputs(memory, may_attend_mask(memory_mask, mask.shape[1], causal=False))
        return self.run(x, positions, mask, may_attend_mask(mask, mask.shape[1], causal=True), cross=cross)

    def step(self, x: Tensor, augment: Augmentation, state: Seq2SeqState) -> Tensor:
        """One incremental step; updates ``state`` (caches and step counter).

        Args:
            x: the embedded token of this step ``(B, 1, D)``.
            augment: the model's augmentation (eval positions of the step).
            state: the decoding state (:class:`~posenc.models.decoding_state.Seq2SeqState`).

        Returns:
            ``(B, 1, D)``.
        """
        rows = x.shape[0]
        q_pos, k_pos, allowed = state.steps.attend(augment, rows, x.device)
        real = torch.ones(rows, 1, dtype=torch.bool, device=x.device)
        cross = CrossInputs(None, state.memory_mask[:, None, None, :])
        h = self.run(x, q_pos, real, allowed, k_pos, state.layers, cross, state.input)
        state.steps.advance()
        return h
