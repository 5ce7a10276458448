"""Decoder-only causal Transformer language model with pluggable position methods.

Shape legend: B batch, L length, D model width, V vocabulary, H heads.

Built from the translation model's pieces: the token :class:`~posenc.models.transformer.Embedding`,
the :class:`~posenc.models.transformer.Stack` (input position layer, attention-level position
context and hooks, N layers, final LN) of encoder layers under a causal mask, with a key/value
cache in decoding, and the augmentation (SHAPE, CAPE, ...) applied to the explicit ``(B, L)`` float positions
in training. In eval mode positions go through ``augment.eval_target`` (the causal transform;
randomized positions: sampled from the seeded eval generator, Ruoss et al. 2023); incremental decoding
reads ``augment.decode_positions`` of its horizon (``init_state(..., horizon=T)``).

Every use of the attention stack is in :meth:`DecoderLM._layers` (one place to adapt when the
hook API changes). The output projection is tied to the token embedding (Press & Wolf 2017).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from posenc.config import require
from posenc.errors import ConfigError
from posenc.models.attention import attention_bias
from posenc.models.config import check_layer_dims
from posenc.models.layers import EncoderLayer
from posenc.models.seq2seq import step_positions
from posenc.models.transformer import Embedding, Fixed, Stack
from posenc.positions import PositionConfig, build_augmentation, default_positions


@dataclass
class LMConfig:
    """A decoder-only LM; field names match :class:`~posenc.models.config.ModelConfig` where shared."""

    layers: int = 2
    d_model: int = 64
    heads: int = 4
    d_ff: int = 256
    dropout: float = 0.0
    attention_dropout: float = 0.0
    activation: str = "relu"
    norm: str = "pre"
    vocab_size: int = 0
    position: PositionConfig = field(default_factory=PositionConfig)

    def __post_init__(self) -> None:
        require(self.layers >= 1, f"lm.layers must be >= 1, got {self.layers}")
        require(self.d_ff >= 1, f"lm.d_ff must be >= 1, got {self.d_ff}")
        check_layer_dims(self, "lm")


class DecoderLM(nn.Module):
    def __init__(self, cfg: LMConfig, pad_id: int = 0) -> None:
        super().__init__()
        if cfg.vocab_size < 1:
            raise ConfigError("lm.vocab_size is not set (it comes from the task's vocabulary)")
        self.cfg, self.pad_id = cfg, pad_id
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, pad_id)
        self.stack = Stack(cfg, EncoderLayer, cfg.layers, causal=True)  # type: ignore[arg-type]  (duck-typed config)
        self.augment = build_augmentation(cfg.position)

    def positions(self, positions: Tensor, mask: Tensor) -> Tensor:
        """Augmented positions ``(B, L)``: random in training, ``eval_target`` (causal) in eval.

        Training uses the target side of ``augment.pair`` (CAPE: never mean-normalised, since a
        causal model cannot know the sequence mean; SHAPE: one offset per sequence)."""
        if self.training:
            return self.augment.pair(positions, mask, positions, mask)[1]
        return self.augment.eval_target(positions, mask)

    def _layers(self, h: Tensor, q_pos: Tensor, k_pos: Tensor, allowed: Tensor, caches: list[dict[str, Tensor]] | None) -> Tensor:
        """The attention stack: hooks/context from positions, then every layer. ``h (B, Lq, D)``."""
        ctx = self.stack.context(q_pos, k_pos)
        caches = caches if caches is not None else [None] * len(self.stack.layers)  # type: ignore[list-item]
        for layer, cache in zip(self.stack.layers, caches):
            h = layer(h, allowed, ctx, cache)
        return self.stack.final_norm(h)

    def logits(self, h: Tensor) -> Tensor:
        """``(..., D)`` → ``(..., V)`` with the tied embedding."""
        return h @ self.embed.weight.t()

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        """Full causal pass: tokens ``(B, L)``, mask ``(B, L)`` (right padding) → logits ``(B, L, V)``."""
        pos = self.positions(default_positions(mask), mask)
        h = self.stack.drop(self.stack.input_pos(self.embed(tokens), pos, mask))
        allowed = attention_bias(mask, mask.shape[1], causal=True)
        return self.logits(self._layers(h, pos, pos, allowed, None))

    def init_state(self, batch: int, device: torch.device | str = "cpu", horizon: int | None = None) -> dict[str, Any]:
        """Empty incremental-decoding state (every tensor has the batch on dim 0). ``horizon``: the
        most steps to decode; it draws the eval positions of all of them at once (needed by
        randomized positions sampled at eval, Ruoss et al. 2023)."""
        layers: list[dict[str, Tensor]] = [{} for _ in self.stack.layers]
        state = {"step": 0, "input": {}, "layers": layers, "positions": torch.zeros(batch, 0, device=device)}
        if horizon is not None:
            state["decode_positions"] = Fixed(self.augment.decode_positions(horizon, device))
        return state

    def step(self, tokens: Tensor, state: dict[str, Any]) -> Tensor:
        """Next-token logits ``(B, V)`` after feeding ``tokens (B,)``; updates ``state`` (eval mode)."""
        t, b = state["step"], tokens.shape[0]
        real = torch.ones(b, 1, dtype=torch.bool, device=tokens.device)
        pos = step_positions(self.augment, state, tokens)
        h = self.stack.drop(self.stack.input_pos(self.embed(tokens[:, None]), pos, real, state["input"]))
        state["positions"] = torch.cat((state["positions"], pos), 1)  # (B, t+1)
        allowed = attention_bias(torch.ones(b, t + 1, dtype=torch.bool, device=tokens.device), 1, causal=True, offset=t)
        h = self._layers(h, pos, state["positions"], allowed, state["layers"])
        state["step"] = t + 1
        return self.logits(h[:, 0])
