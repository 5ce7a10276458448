"""Encoder–decoder Transformer with pluggable position methods.

Shape legend: B batch, L length, S source length, T target length (T_max: the decoding horizon),
H heads, D model width, Dh head width, V vocabulary.

Positions are an explicit float tensor (B, L) per side. The input-layer method maps
embeddings → embeddings; the attention-level method builds a context once per stack and hands
each self-attention layer its hook; the augmentation (SHAPE, CAPE) rewrites the positions tensor
(randomly in training). :meth:`Stack.run` is the one loop over layers that every model uses
(encoder, decoder, decoder-only LM; full passes and incremental steps).

Incremental decoding keeps its per-step quantities in a small typed state object per model
(:class:`~posenc.models.seq2seq.Seq2SeqState`, :class:`~posenc.models.lm.LMState`) whose tensors all
have the batch on dim 0, so beam search reorders it with :func:`reorder_state`. The step bookkeeping
is a :class:`Steps` (positions grown by one column per step) or, for fixed shapes (CUDA graphs), a
:class:`FixedSteps` (a device step counter and preallocated positions).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import torch
from torch import Tensor, nn

from posenc.errors import ConfigError
from posenc.models.attention import KVCache, attention_bias
from posenc.models.config import ModelConfig, StackConfig
from posenc.models.layers import BeamInvariant, CrossInputs, DecoderLayer, EncoderLayer
from posenc.positions import Augmentation, build_attention, build_input
from posenc.positions.base import PositionContext

if TYPE_CHECKING:
    from posenc.models.seq2seq import Seq2SeqState

__all__ = ["BeamInvariant", "Decoder", "Embedding", "Encoder", "Fixed", "FixedSteps", "Stack", "Steps", "reorder_state"]


class Embedding(nn.Module):
    """Token embedding scaled by √D (Vaswani et al. §3.4)."""

    def __init__(self, vocab: int, d_model: int, pad_id: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)
        with torch.no_grad():
            self.weight[pad_id].zero_()
        self.pad_id, self.scale = pad_id, math.sqrt(d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        """Tokens ``(B, L)`` → ``(B, L, D)``."""
        return nn.functional.embedding(tokens, self.weight, self.pad_id) * self.scale


class Stack(nn.Module):
    """Input position layer + N layers (+ final LN for pre-LN): encoder, decoder and LM stacks."""

    def __init__(self, spec: StackConfig) -> None:
        super().__init__()
        d, pos = spec.d_model, spec.position
        self.input_pos = build_input(pos, d)
        self.attn_pos = build_attention(pos, d, spec.num_layers, spec.heads, spec.causal)
        layer_cls = DecoderLayer if spec.cross_attention else EncoderLayer
        self.layers = nn.ModuleList(
            layer_cls(d, spec.heads, spec.d_ff, spec.dropout, spec.attention_dropout, spec.norm == "pre", spec.activation,
                      hook=self.attn_pos.hook(i))  # each layer gets its hook once, at construction
            for i in range(spec.num_layers)
        )
        self.final_norm = nn.LayerNorm(d) if spec.norm == "pre" else nn.Identity()
        self.drop = nn.Dropout(spec.dropout)

    def context(self, q_pos: Tensor, k_pos: Tensor) -> PositionContext | None:
        """The attention method's per-call context from query/key positions ``(B, Lq)``, ``(B, Lk)``,
        computed once per stack and passed to every layer (``None`` for the null method)."""
        return self.attn_pos.context(q_pos, k_pos)

    def run(self, x: Tensor, q_pos: Tensor, mask: Tensor, allowed: Tensor, k_pos: Tensor | None = None,
            caches: Sequence[Any] | None = None, cross: CrossInputs | None = None,
            input_state: dict[str, Tensor] | None = None) -> Tensor:
        """The stack loop: embedded ``x (B, Lq, D)`` at positions ``q_pos (B, Lq)`` (``mask (B, Lq)``:
        real tokens) attending under ``allowed (B, 1, Lq, Lk)`` to keys at ``k_pos (B, Lk)`` (default
        ``q_pos``) → ``(B, Lq, D)``. Incremental decoding passes the layers' ``caches`` and the input
        method's ``input_state``; decoder stacks pass ``cross``."""
        h = self.drop(self.input_pos(x, q_pos, mask, input_state))
        ctx = self.context(q_pos, q_pos if k_pos is None else k_pos)
        for layer, cache in zip(self.layers, caches if caches is not None else [None] * len(self.layers)):
            h = layer(h, allowed, ctx, cache, cross)
        return self.final_norm(h)


class Encoder(Stack):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg.encoder_stack())

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor) -> Tensor:
        """Embedded source ``(B, S, D)``, positions ``(B, S)``, mask ``(B, S)`` → ``(B, S, D)``."""
        return self.run(x, positions, mask, attention_bias(mask, mask.shape[1], causal=False))


class Fixed:
    """A decoding-state entry without a batch dimension (a device step counter, the positions of
    every step): :func:`reorder_state` leaves it alone; ``value`` is updated in place only."""

    def __init__(self, value: Tensor) -> None:
        self.value = value


@dataclass
class Steps:
    """Step bookkeeping of incremental decoding: ``step`` t, the positions ``(B, t)`` of the steps so
    far, and (static states, and randomized positions sampled at eval) ``decode_positions``, the eval
    positions ``(1, T_max)`` of every step (Ruoss et al. 2023 sample them for the whole horizon)."""

    positions: Tensor
    decode_positions: Fixed | None = None
    step: int = 0

    def query(self, augment: Augmentation, rows: int, device: torch.device) -> Tensor:
        """Position ``(B, 1)`` of this step: the stored table's column t, else the eval transform of t."""
        t = self.step
        if self.decode_positions is not None:
            return self.decode_positions.value[:, t : t + 1].expand(rows, 1)
        if augment.needs_decode_horizon:
            raise ConfigError("randomized positions sampled at eval need a decoding horizon: use init_static_state(..., max_len) "
                              "or model.position.randomized.eval=sequential")
        return augment.eval_target(torch.full((rows, 1), float(t), device=device))

    def attend(self, augment: Augmentation, rows: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """Query positions ``(B, 1)``, key positions ``(B, t+1)`` (this step's appended) and the causal
        mask ``(B, 1, 1, t+1)`` of this step."""
        q_pos = self.query(augment, rows, device)
        self.positions = torch.cat((self.positions, q_pos), 1)  # (B, t+1)
        real = torch.ones(rows, self.step + 1, dtype=torch.bool, device=device)
        return q_pos, self.positions, attention_bias(real, 1, causal=True, offset=self.step)

    def advance(self) -> None:
        self.step += 1


@dataclass
class FixedSteps(Steps):
    """:class:`Steps` with every shape independent of the step (capturable as one CUDA graph): the
    step index is the device counter ``counter (1,)`` and keys live in fixed
    :class:`~posenc.models.attention.KVCache` buffers ``(N, H, T_max, Dh)``; ``decode_positions``
    holds the positions of all T_max steps."""

    counter: Fixed = field(default_factory=lambda: Fixed(torch.zeros(1, dtype=torch.long)))

    def attend(self, augment: Augmentation, rows: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """Query positions ``(N, 1)``, key positions ``(N, T_max)`` and the causal mask ``(N, 1, 1, T_max)``
        of the step ``t = counter``, all computed on the device.

        Key slots after ``t`` are masked; the last slot's position is replaced by the query's (it is
        masked unless it is the query itself), so hooks that transform the newest key by the last key
        position (RoPE) see the right one.
        """
        assert self.decode_positions is not None
        t, positions = self.counter.value, self.decode_positions.value  # (1,), (1, T_max)
        slots = torch.arange(positions.shape[1], device=t.device)
        q_pos = positions.index_select(1, t)  # (1, 1)
        k_pos = torch.where(slots == positions.shape[1] - 1, q_pos, positions)
        allowed = (slots <= t)[None, None, None, :]
        return q_pos.expand(rows, 1), k_pos.expand(rows, -1), allowed.expand(rows, 1, 1, -1)

    def advance(self) -> None:
        self.counter.value.add_(1)
        self.step += 1


class Decoder(Stack):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg.decoder_stack())

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, memory: Tensor, memory_mask: Tensor) -> Tensor:
        """Teacher-forced pass: embedded target ``(B, T, D)`` → ``(B, T, D)``."""
        cross = CrossInputs(memory, attention_bias(memory_mask, mask.shape[1], causal=False))
        return self.run(x, positions, mask, attention_bias(mask, mask.shape[1], causal=True), cross=cross)

    def step(self, x: Tensor, augment: Augmentation, state: Seq2SeqState) -> Tensor:
        """One incremental step: embedded token ``(B, 1, D)`` → ``(B, 1, D)``; updates ``state``
        (:class:`~posenc.models.seq2seq.Seq2SeqState`)."""
        rows = x.shape[0]
        q_pos, k_pos, allowed = state.steps.attend(augment, rows, x.device)
        real = torch.ones(rows, 1, dtype=torch.bool, device=x.device)
        cross = CrossInputs(None, state.memory_mask[:, None, None, :])
        h = self.run(x, q_pos, real, allowed, k_pos, state.layers, cross, state.input)
        state.steps.advance()
        return h


def reorder_state(state: Any, index: Tensor, within_groups: bool = False) -> Any:
    """Select rows ``index`` (dim 0) of every tensor in a nested decoding state (dataclasses,
    dicts, lists).

    A :class:`~posenc.models.attention.KVCache` is reordered in place when ``index`` keeps the
    number of rows (so the old state must not be used afterwards). ``within_groups=True`` promises
    that ``index`` maps every row to a row of its own beam group (beam reordering with a fixed
    number of sentences); :class:`BeamInvariant` entries are then not copied.
    """
    if isinstance(state, Tensor):
        return state.index_select(0, index)
    if isinstance(state, KVCache):
        return state.reorder(index)
    if isinstance(state, BeamInvariant):
        return state if within_groups else BeamInvariant(reorder_state(dict(state), index))
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return dataclasses.replace(state, **{f.name: reorder_state(getattr(state, f.name), index, within_groups)
                                             for f in dataclasses.fields(state)})
    if isinstance(state, dict):
        return {k: reorder_state(v, index, within_groups) for k, v in state.items()}
    if isinstance(state, list):
        return [reorder_state(v, index, within_groups) for v in state]
    return state
