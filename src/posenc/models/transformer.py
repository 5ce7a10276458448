"""Encoder–decoder Transformer with pluggable position methods.

Shape legend: B batch, S source length, T target length, D model width, V vocabulary.

Positions are an explicit float tensor (B, L) per side. The input-layer method maps
embeddings → embeddings; the attention-level method builds a context once per stack and hands
each self-attention layer its hook; the augmentation (SHAPE, CAPE) rewrites the positions tensor
(randomly in training). Incremental decoding keeps every per-step quantity in a ``state`` dict
whose tensors all have the batch on dim 0, so beam search reorders it with :func:`reorder_state`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from posenc.models.attention import KVCache, attention_bias
from posenc.models.config import ModelConfig
from posenc.models.layers import DecoderLayer, EncoderLayer
from posenc.positions import build_attention, build_input


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
        return nn.functional.embedding(tokens, self.weight, self.pad_id) * self.scale


class Stack(nn.Module):
    """Input position layer + N layers (+ final LN for pre-LN); shared by encoder and decoder."""

    def __init__(self, cfg: ModelConfig, layer_cls: type, num_layers: int, causal: bool = False) -> None:
        """``causal``: masked self-attention (decoder / LM); picks causal forms of attention methods."""
        super().__init__()
        d, pos = cfg.d_model, cfg.position
        self.input_pos = build_input(pos, d)
        self.attn_pos = build_attention(pos, d, num_layers, cfg.heads, causal)
        self.layers = nn.ModuleList(
            layer_cls(d, cfg.heads, cfg.d_ff, cfg.dropout, cfg.attention_dropout, cfg.norm == "pre", cfg.activation,
                      hook=self.attn_pos.hook(i))  # each layer gets its hook once, at construction
            for i in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d) if cfg.norm == "pre" else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)

    def context(self, q_pos: Tensor, k_pos: Tensor) -> Any:
        """The attention method's per-call context from query/key positions ``(B, Lq)``, ``(B, Lk)``,
        computed once per stack and passed to every layer (``None`` for the null method)."""
        return self.attn_pos.context(q_pos, k_pos)


class Encoder(Stack):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, EncoderLayer, cfg.encoder_layers)

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor) -> Tensor:
        """Embedded source ``(B, S, D)``, positions ``(B, S)``, mask ``(B, S)`` → ``(B, S, D)``."""
        h = self.drop(self.input_pos(x, positions, mask))
        allowed = attention_bias(mask, mask.shape[1], causal=False)
        ctx = self.context(positions, positions)
        for layer in self.layers:
            h = layer(h, allowed, ctx)
        return self.final_norm(h)


class Decoder(Stack):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, DecoderLayer, cfg.decoder_layers, causal=True)

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, memory: Tensor, memory_mask: Tensor) -> Tensor:
        """Teacher-forced pass: embedded target ``(B, T, D)`` → ``(B, T, D)``."""
        h = self.drop(self.input_pos(x, positions, mask))
        self_allowed = attention_bias(mask, mask.shape[1], causal=True)
        cross_allowed = attention_bias(memory_mask, mask.shape[1], causal=False)
        ctx = self.context(positions, positions)
        for layer in self.layers:
            h = layer(h, memory, self_allowed, cross_allowed, ctx)
        return self.final_norm(h)

    def step(self, x: Tensor, position: Tensor, state: dict[str, Any]) -> Tensor:
        """One incremental step: embedded token ``(B, 1, D)``, position ``(B, 1)`` → ``(B, 1, D)``."""
        t = state["step"]
        real = torch.ones(x.shape[0], 1, dtype=torch.bool, device=x.device)
        h = self.drop(self.input_pos(x, position, real, state["input"]))
        state["positions"] = torch.cat((state["positions"], position), 1)  # (B, t+1)
        self_mask = torch.ones(x.shape[0], t + 1, dtype=torch.bool, device=x.device)
        self_allowed = attention_bias(self_mask, 1, causal=True, offset=t)
        cross_allowed = state["memory_mask"][:, None, None, :]
        ctx = self.context(position, state["positions"])
        for layer, cache in zip(self.layers, state["layers"]):
            h = layer(h, None, self_allowed, cross_allowed, ctx, cache)
        state["step"] = t + 1
        return self.final_norm(h)

    def step_fixed(self, x: Tensor, state: dict[str, Any]) -> Tensor:
        """:meth:`step` with every shape independent of the step (capturable as one CUDA graph):
        ``x (N, 1, D)`` → ``(N, 1, D)``; the step index is the device counter ``state["t"]``, keys and
        values live in fixed :class:`~posenc.models.attention.KVCache` buffers ``(N, H, T_max, Dh)``."""
        q_pos, k_pos, self_allowed = _fixed_step_inputs(state, x.shape[0])
        real = torch.ones(x.shape[0], 1, dtype=torch.bool, device=x.device)
        h = self.drop(self.input_pos(x, q_pos, real, state["input"]))
        cross_allowed = state["memory_mask"][:, None, None, :]
        ctx = self.context(q_pos, k_pos)
        for layer, cache in zip(self.layers, state["layers"]):
            h = layer(h, None, self_allowed, cross_allowed, ctx, cache)
        state["t"].value.add_(1)
        state["step"] += 1
        return self.final_norm(h)


class Fixed:
    """A decoding-state entry without a batch dimension (a device step counter, the positions of
    every step): :func:`reorder_state` leaves it alone; ``value`` is updated in place only."""

    def __init__(self, value: Tensor) -> None:
        self.value = value


class BeamInvariant(dict):
    """A state entry equal on every row of a sentence's beam group (the cross-attention keys and
    values): :func:`reorder_state` with ``within_groups=True`` leaves it as it is."""


def _fixed_step_inputs(state: dict[str, Any], rows: int) -> tuple[Tensor, Tensor, Tensor]:
    """Query positions ``(N, 1)``, key positions ``(N, T_max)`` and the causal mask ``(N, 1, 1, T_max)``
    of the step ``t = state["t"]`` in a fixed-shape state, all computed on the device.

    Key slots after ``t`` are masked; the last slot's position is replaced by the query's (it is
    masked unless it is the query itself), so hooks that transform the newest key by the last key
    position (RoPE) see the right one.
    """
    t, positions = state["t"].value, state["all_positions"].value  # (1,), (1, T_max)
    slots = torch.arange(positions.shape[1], device=t.device)
    q_pos = positions.index_select(1, t)  # (1, 1)
    k_pos = torch.where(slots == positions.shape[1] - 1, q_pos, positions)
    allowed = (slots <= t)[None, None, None, :]
    return q_pos.expand(rows, 1), k_pos.expand(rows, -1), allowed.expand(rows, 1, 1, -1)


def reorder_state(state: Any, index: Tensor, within_groups: bool = False) -> Any:
    """Select rows ``index`` (dim 0) of every tensor in a nested decoding state.

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
    if isinstance(state, dict):
        return {k: reorder_state(v, index, within_groups) for k, v in state.items()}
    if isinstance(state, list):
        return [reorder_state(v, index, within_groups) for v in state]
    return state
