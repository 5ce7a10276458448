"""The translation model: embeddings, encoder, decoder, output projection, positions.

Shape legend: B batch, S source length, T target length, D model width, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc.errors import ConfigError
from posenc.models.attention import KVCache
from posenc.models.config import ModelConfig
from posenc.models.decoding_state import FixedSteps, Seq2SeqState, Steps, Unbatched
from posenc.models.layers import BeamInvariant, DecoderLayerCache
from posenc.models.transformer import Decoder, Embedding, Encoder
from posenc.positions import build_augmentation, default_positions


class Seq2SeqTransformer(nn.Module):
    """The encoder-decoder Transformer: embeddings (shared per ``share_embeddings``), encoder,
    decoder, the augmentation of both sides' positions and the output projection.

    Args:
        cfg: the model config (``vocab_size`` set).
        pad_id: the padding token.

    Raises:
        ConfigError: ``vocab_size`` not set.
    """

    def __init__(self, cfg: ModelConfig, pad_id: int = 0) -> None:
        super().__init__()
        if cfg.vocab_size < 1:
            raise ConfigError("model.vocab_size is not set (it comes from the tokenizer)")
        self.cfg, self.pad_id = cfg, pad_id
        self.src_embed = Embedding(cfg.vocab_size, cfg.d_model, pad_id)
        self.tgt_embed = (self.src_embed if cfg.share_embeddings == "all"
                          else Embedding(cfg.vocab_size, cfg.d_model, pad_id))
        self.encoder, self.decoder = Encoder(cfg), Decoder(cfg)
        self.augment = build_augmentation(cfg.position)
        if cfg.share_embeddings == "none":
            self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
            nn.init.normal_(self.output.weight, std=cfg.d_model**-0.5)
        else:
            self.output = None  # tied to the target embedding

    def logits(self, h: Tensor) -> Tensor:
        """Project decoder states to the vocabulary (the tied target embedding unless ``share_embeddings``
        is ``none``).

        Args:
            h: decoder states ``(..., D)``.

        Returns:
            Logits ``(..., V)``.
        """
        if self.output is not None:
            return self.output(h)
        return h @ self.tgt_embed.weight.t()

    def positions(self, src_mask: Tensor, tgt_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Source and target positions after the augmentation (if any).

        Args:
            src_mask: ``(B, S)``, True at real source tokens.
            tgt_mask: ``(B, T)``, True at real target tokens.

        Returns:
            Float positions ``(B, S)`` and ``(B, T)``.
        """
        return self.augment.pair(default_positions(src_mask), src_mask, default_positions(tgt_mask), tgt_mask)

    def encode(self, src: Tensor, src_mask: Tensor, src_pos: Tensor | None = None) -> Tensor:
        """Encode the source.

        Args:
            src: long source ids ``(B, S)``.
            src_mask: ``(B, S)``, True at real tokens.
            src_pos: float positions ``(B, S)``; None: the augmentation's (its eval transform in eval).

        Returns:
            The memory ``(B, S, D)``.
        """
        if src_pos is None:
            src_pos, _ = self.positions(src_mask, src_mask[:, :1])
        return self.encoder(self.src_embed(src), src_pos, src_mask)

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor) -> Tensor:
        """Teacher-forced pass.

        Args:
            src: long source ids ``(B, S)``.
            src_mask: ``(B, S)``, True at real source tokens.
            tgt_in: long target input ids ``(B, T)`` (BOS first).
            tgt_mask: ``(B, T)``, True at real target tokens.

        Returns:
            Logits ``(B, T, V)``.
        """
        src_pos, tgt_pos = self.positions(src_mask, tgt_mask)
        tgt = self.tgt_embed(tgt_in)
        self.decoder.input_pos.prefetch(tgt, tgt_pos, tgt_mask)  # GRU: overlaps the encoder (positions/gru.py)
        memory = self.encoder(self.src_embed(src), src_pos, src_mask)
        h = self.decoder(tgt, tgt_pos, tgt_mask, memory, src_mask)
        return self.logits(h)

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> Seq2SeqState:
        """A decoding state: cross-attention keys/values computed once, empty self-attention caches.

        Args:
            memory: the encoder output ``(B, S, D)``.
            memory_mask: ``(B, S)``, True at real source tokens.

        Returns:
            The state.
        """
        layers = []
        for layer in self.decoder.layers:
            k, v = layer.cross_attn.project_kv(memory)
            layers.append(DecoderLayerCache({}, BeamInvariant(k=k, v=v)))
        return Seq2SeqState(layers, memory_mask, Steps(memory.new_zeros(memory.shape[0], 0)))

    def init_static_state(
        self, memory: Tensor, memory_mask: Tensor, max_len: int, fixed_shapes: bool = False
    ) -> Seq2SeqState:
        """:meth:`init_state` with preallocated self-attention caches for ``max_len`` steps
        (:class:`~posenc.models.attention.KVCache`, written in place instead of concatenated).

        ``fixed_shapes``: every step has the same shapes and reads the step index from a device
        counter (:class:`~posenc.models.decoding_state.FixedSteps`), attending over all ``max_len`` cache
        slots with a mask, so one step can be captured as a CUDA graph and replayed
        (:mod:`posenc.decoding.graphs`).

        Args:
            memory: the encoder output ``(B, S, D)``.
            memory_mask: ``(B, S)``, True at real source tokens.
            max_len: T_max, the most steps to decode.
            fixed_shapes: every step with the same shapes (a :class:`FixedSteps` state).

        Returns:
            The state.
        """
        state = self.init_state(memory, memory_mask)
        at = torch.zeros(1, dtype=torch.long, device=memory.device) if fixed_shapes else None
        for layer in state.layers:
            layer.self_attn = KVCache(max_len, at)
        pos = Unbatched(self.augment.decode_positions(max_len, memory.device))  # (1, T_max): eval positions, every step
        empty = state.steps.positions
        state.steps = Steps(empty, pos) if at is None else FixedSteps(empty, pos, counter=Unbatched(at))
        return state

    def step(self, tokens: Tensor, state: Seq2SeqState) -> Tensor:
        """Feed one token per row; updates ``state``.

        Args:
            tokens: the last tokens ``(B,)``, long.
            state: the decoding state.

        Returns:
            Next-token logits ``(B, V)``.
        """
        h = self.decoder.step(self.tgt_embed(tokens[:, None]), self.augment, state)
        return self.logits(h[:, 0])
