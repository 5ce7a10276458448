"""Decoder-only causal Transformer language model with pluggable position methods.

Shape legend: B batch, L length, D model width, V vocabulary, H heads.

Built from the translation model's pieces: the token :class:`~posenc.models.transformer.Embedding`,
the :class:`~posenc.models.transformer.Stack` (input position layer, attention-level position
context and hooks, N layers, final LN) of encoder layers under a causal mask, with a key/value
cache in decoding, and the augmentation (SHAPE, CAPE, ...) applied to the explicit ``(B, L)`` float positions
in training. In eval mode positions go through ``augment.eval_target`` (the causal transform;
randomized positions: sampled from the seeded eval generator, Ruoss et al. 2023); incremental decoding
reads ``augment.decode_positions`` of its horizon (``init_state(..., horizon=T)``).

The layers run in :meth:`~posenc.models.transformer.Stack.run`, the loop shared with the
translation model. The output projection is tied to the token embedding (Press & Wolf 2017).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from posenc.config import require
from posenc.errors import ConfigError
from posenc.models.attention import may_attend_mask
from posenc.models.config import StackConfig, check_layer_dims, stack_config
from posenc.models.decoding_state import LMState, Steps, Unbatched
from posenc.models.layers import SelfCache
from posenc.models.transformer import Embedding, Stack
from posenc.positions import PositionConfig, build_augmentation, default_positions


@dataclass
class LMConfig:
    """A decoder-only LM (the ``lm`` section); field names match
    :class:`~posenc.models.config.ModelConfig` where shared.

    Args:
        layers: causal layers (at least 1).
        d_model: model width D, even.
        heads: attention heads (D divisible by them).
        d_ff: feed-forward hidden width.
        dropout: dropout of the residual branches and feed-forward blocks.
        attention_dropout: dropout of the attention weights.
        activation: ``relu`` or ``gelu``.
        norm: layer-norm placement, ``pre`` or ``post``.
        vocab_size: vocabulary size (0: set from the task's vocabulary).
        position: the position methods.

    Raises:
        ConfigError: a value out of range.
    """

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

    def stack(self) -> StackConfig:
        """The LM's stack config.

        Returns:
            ``layers`` causal layers (encoder layers under a causal mask).
        """
        return stack_config(self, self.layers, causal=True)


class DecoderLM(nn.Module):
    """Decoder-only causal Transformer LM with a tied output projection.

    Args:
        cfg: the LM config (``vocab_size`` set).
        pad_id: the padding token.

    Raises:
        ConfigError: ``vocab_size`` not set.
    """

    def __init__(self, cfg: LMConfig, pad_id: int = 0) -> None:
        super().__init__()
        if cfg.vocab_size < 1:
            raise ConfigError("lm.vocab_size is not set (it comes from the task's vocabulary)")
        self.cfg, self.pad_id = cfg, pad_id
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, pad_id)
        self.stack = Stack(cfg.stack())
        self.augment = build_augmentation(cfg.position)

    def positions(self, positions: Tensor, mask: Tensor) -> Tensor:
        """Augmented positions: random in training, ``eval_target`` (causal) in eval.

        Training uses the target side of ``augment.pair`` (CAPE: never mean-normalised, since a
        causal model cannot know the sequence mean; SHAPE: one offset per sequence).

        Args:
            positions: the tokens' position ids ``(B, L)``, float.
            mask: ``(B, L)``, True at real tokens.

        Returns:
            Float positions ``(B, L)``.
        """
        if self.training:
            return self.augment.pair(positions, mask, positions, mask)[1]
        return self.augment.eval_target(positions, mask)

    def logits(self, h: Tensor) -> Tensor:
        """Project hidden states to the vocabulary with the tied embedding.

        Args:
            h: hidden states ``(..., D)``.

        Returns:
            Logits ``(..., V)``.
        """
        return h @ self.embed.weight.t()

    def forward(self, tokens: Tensor, mask: Tensor, positions: Tensor | None = None) -> Tensor:
        """Full causal pass.

        Args:
            tokens: long ids ``(B, L)``, right-padded.
            mask: ``(B, L)``, True at real tokens.
            positions: the tokens' position ids ``(B, L)`` (a task may give its own, e.g. position
                coupling), then augmented as usual; None: 0..L−1.

        Returns:
            Logits ``(B, L, V)``.
        """
        pos = self.positions(default_positions(mask) if positions is None else positions, mask)
        allowed = may_attend_mask(mask, mask.shape[1], causal=True)
        return self.logits(self.stack.run(self.embed(tokens), pos, mask, allowed))

    def init_state(self, batch: int, device: torch.device | str = "cpu", horizon: int | None = None) -> LMState:
        """An empty incremental-decoding state.

        Args:
            batch: rows B.
            device: where the state's tensors are.
            horizon: the most steps to decode; it draws the eval positions of all of them at once
                (needed by randomized positions sampled at eval, Ruoss et al. 2023); None: no horizon.

        Returns:
            The state, with empty self-attention caches.

        Raises:
            ConfigError: no horizon where the augmentation needs one.
        """
        if horizon is None and self.augment.needs_decode_horizon:  # fail here, not at the first step
            raise ConfigError("randomized positions sampled at eval need a decoding horizon: "
                              "init_state(batch, device, horizon=N), or model.position.randomized.eval=sequential")
        table = Unbatched(self.augment.decode_positions(horizon, device)) if horizon is not None else None
        layers: list[SelfCache] = [{} for _ in self.stack.layers]
        return LMState(layers, Steps(torch.zeros(batch, 0, device=device), table))

    def step(self, tokens: Tensor, state: LMState, positions: Tensor | None = None) -> Tensor:
        """Feed one token per row; updates ``state`` (eval mode).

        Args:
            tokens: long ids ``(B,)``.
            state: the decoding state.
            positions: the tokens' own position ids ``(B,)``, as :meth:`forward` takes them (e.g.
                position coupling); None: the step index.

        Returns:
            Next-token logits ``(B, V)``.
        """
        b = tokens.shape[0]
        q_pos, k_pos, allowed = state.steps.attend(self.augment, b, tokens.device, positions)
        real = torch.ones(b, 1, dtype=torch.bool, device=tokens.device)
        h = self.stack.run(self.embed(tokens[:, None]), q_pos, real, allowed, k_pos, state.layers, None, state.input)
        state.steps.advance()
        return self.logits(h[:, 0])
