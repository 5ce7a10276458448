"""RNN-NMT baseline: stacked bi-LSTM encoder, stacked LSTM decoder, Luong global dot attention
with input feeding (Luong, Pham & Manning 2015, §3.1 and §3.3; Neishi & Yoshinaga 2019, §5.1).

Shape legend: B batch, S source length, T target length, H hidden width, E embedding width,
N number of decoder layers, V vocabulary.

Per target step t (Luong et al. Eq. 5-7 with the "dot" score of Eq. 8 and input feeding §3.3):

    h_t      = LSTM([emb(y_{t-1}); h~_{t-1}], h_{t-1})      (input feeding; h~_0 = 0)
    a_t(s)   = softmax_s(h_t · h̄_s)                          (global attention, dot score)
    c_t      = Σ_s a_t(s) h̄_s
    h~_t     = tanh(W_c [c_t; h_t])
    p(y_t)   = softmax(W_s h~_t)

Choices where the papers leave freedom (documented deviations):
* The bidirectional encoder uses H/2 units per direction, so the memory h̄_s (forward and
  backward outputs concatenated) has width H and the dot score needs no projection (as
  OpenNMT's ``brnn`` does). Neishi et al. do not state the split; their Table 2 counts cannot
  be reproduced from the text, so parameter counts differ from theirs.
* Every decoder layer starts from the top encoder layer's final states of both directions,
  read off the memory (forward half at the last real token, backward half at the first), with
  zero cells. Reading them off the memory keeps ``init_state(memory, memory_mask)`` a function
  of the memory alone, the protocol shared with :class:`Seq2SeqTransformer`.
* The teacher-forced ``forward`` runs the same per-step recurrence as ``step`` (input feeding
  makes the decoder inherently sequential).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from posenc.config import require
from posenc.errors import ConfigError, DataError


@dataclass
class RNNConfig:
    """Hyperparameters of the RNN-NMT baseline (the ``rnn`` section; Neishi & Yoshinaga §5.1: 4/3
    layers, 512).

    Args:
        hidden: hidden width H, even (H/2 per encoder direction).
        embed: embedding width E; 0: H.
        encoder_layers: bi-LSTM encoder layers.
        decoder_layers: LSTM decoder layers N.
        dropout: dropout of embeddings, between LSTM layers and of the attentional states.
        share_embeddings: ``none``, ``decoder`` (output tied to the target embedding) or ``all``
            (source and target embeddings shared too); tying needs E = H.
        vocab_size: vocabulary size V (0: set from the tokenizer).

    Raises:
        ConfigError: a value out of range, or ``all`` with E ≠ H.
    """

    hidden: int = 512
    embed: int = 0  # 0 → same as hidden
    encoder_layers: int = 4
    decoder_layers: int = 3
    dropout: float = 0.2
    share_embeddings: str = "none"
    vocab_size: int = 0

    def __post_init__(self) -> None:
        require(self.hidden > 0 and self.hidden % 2 == 0, f"rnn.hidden must be positive and even, got {self.hidden}")
        require(self.embed >= 0, f"rnn.embed must be >= 0, got {self.embed}")
        require(self.encoder_layers >= 1 and self.decoder_layers >= 1, "rnn: need >= 1 encoder and >= 1 decoder layer")
        require(0.0 <= self.dropout < 1.0, f"rnn.dropout must be in [0, 1), got {self.dropout}")
        require(self.share_embeddings in ("none", "decoder", "all"),
                f"rnn.share_embeddings must be none|decoder|all, got {self.share_embeddings!r}")
        require(self.vocab_size >= 0, f"rnn.vocab_size must be >= 0, got {self.vocab_size}")
        require(
            self.share_embeddings != "all" or self.embed_dim == self.hidden,
            f"rnn.share_embeddings=all ties the output layer to the embeddings and needs embed == hidden "
            f"({self.embed} != {self.hidden})",
        )

    @property
    def embed_dim(self) -> int:
        """The embedding width E (``embed``, or ``hidden`` when 0)."""
        return self.embed or self.hidden


@dataclass
class RNNState:
    """Decoding state of :class:`RNNNMT`; every tensor is batch-first so ``reorder_state`` can select
    beams.

    Args:
        memory: the encoder output ``(B, S, H)``.
        memory_mask: ``(B, S)``, True at real source tokens.
        h: LSTM hidden states ``(B, N, H)`` (N decoder layers).
        c: LSTM cells ``(B, N, H)``.
        feed: h~_{t-1} ``(B, H)`` (input feeding, Luong §3.3).
        step: t, the steps taken.
    """

    memory: Tensor
    memory_mask: Tensor
    h: Tensor
    c: Tensor
    feed: Tensor
    step: int = 0


class RNNNMT(nn.Module):
    """Luong-style attentional encoder–decoder with the decoding protocol of Seq2SeqTransformer.

    Args:
        cfg: the RNN config (``vocab_size`` set).
        pad_id: the padding token.

    Raises:
        ConfigError: ``vocab_size`` not set, or tied embeddings with E ≠ H.
    """

    #: See posenc.training.compiled.capture_blockers.
    capturable = False
    capture_blocker = "packed LSTM sequences need the lengths on the host, and torch.compile does not trace nn.LSTM"

    def __init__(self, cfg: RNNConfig, pad_id: int = 0) -> None:
        super().__init__()
        if cfg.vocab_size < 1:
            raise ConfigError("rnn.vocab_size is not set (it comes from the tokenizer)")
        self.cfg, self.pad_id = cfg, pad_id
        e, h = cfg.embed_dim, cfg.hidden
        self.src_embed = nn.Embedding(cfg.vocab_size, e, padding_idx=pad_id)
        self.tgt_embed = (self.src_embed if cfg.share_embeddings == "all"
                          else nn.Embedding(cfg.vocab_size, e, padding_idx=pad_id))
        drop_between = cfg.dropout if cfg.encoder_layers > 1 else 0.0
        self.encoder = nn.LSTM(e, h // 2, cfg.encoder_layers, batch_first=True, bidirectional=True,
                               dropout=drop_between)
        drop_between = cfg.dropout if cfg.decoder_layers > 1 else 0.0
        self.decoder = nn.LSTM(e + h, h, cfg.decoder_layers, batch_first=True, dropout=drop_between)
        self.combine = nn.Linear(2 * h, h, bias=False)  # W_c (Luong Eq. 5)
        self.drop = nn.Dropout(cfg.dropout)
        if cfg.share_embeddings == "none":
            self.output = nn.Linear(h, cfg.vocab_size, bias=False)  # W_s (Luong Eq. 6)
        elif e == h:
            self.output = None  # tied to the target embedding
        else:
            raise ConfigError(
                f"rnn.share_embeddings={cfg.share_embeddings} ties the output layer and needs embed == hidden")

    def logits(self, h: Tensor) -> Tensor:
        """Project attentional states to the vocabulary (W_s, or the tied target embedding).

        Args:
            h: attentional states ``(..., H)``.

        Returns:
            Logits ``(..., V)``.
        """
        if self.output is not None:
            return self.output(h)
        return h @ self.tgt_embed.weight.t()

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """Encode the source with the bi-LSTM.

        Args:
            src: long source ids ``(B, S)``, right-padded.
            src_mask: ``(B, S)``, True at real tokens.

        Returns:
            The memory ``(B, S, H)``, zeros at pads.

        Raises:
            DataError: an empty source sequence.
        """
        lengths = src_mask.sum(1)
        if bool((lengths == 0).any()):
            raise DataError("rnn-nmt: a source sequence has length 0 (nothing to encode)")
        x = self.drop(self.src_embed(src))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.encoder(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        return memory

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> RNNState:
        """A decoding state: h_0 from the encoder's last states, c_0 and feed zero.

        Args:
            memory: the encoder output ``(B, S, H)``.
            memory_mask: ``(B, S)``, True at real source tokens.

        Returns:
            The state.
        """
        b, _, h = memory.shape
        last = (memory_mask.sum(1) - 1).clamp(min=0)  # index of the last real token, (B,)
        fwd = memory[torch.arange(b, device=memory.device), last, : h // 2]  # (B, H/2)
        bwd = memory[:, 0, h // 2 :]  # (B, H/2)
        n = self.cfg.decoder_layers
        h0 = torch.cat((fwd, bwd), -1)[:, None, :].expand(b, n, h).contiguous()
        return RNNState(memory, memory_mask, h0, torch.zeros_like(h0), memory.new_zeros(b, h))

    def attend(self, query: Tensor, memory: Tensor, memory_mask: Tensor) -> Tensor:
        """Global dot attention + W_c (Luong Eq. 5, 7, 8).

        Args:
            query: the top decoder state h_t ``(B, H)``.
            memory: the encoder output ``(B, S, H)``.
            memory_mask: ``(B, S)``, True at real source tokens.

        Returns:
            The attentional state h~_t ``(B, H)``.
        """
        scores = torch.einsum("bh,bsh->bs", query, memory).masked_fill(~memory_mask, float("-inf"))
        context = torch.einsum("bs,bsh->bh", torch.softmax(scores, -1), memory)
        return torch.tanh(self.combine(torch.cat((context, query), -1)))

    def _advance(self, emb: Tensor, state: RNNState) -> Tensor:
        """One decoder step from embedded tokens ``(B, E)``; updates ``state``; returns h~_t."""
        x = torch.cat((emb, state.feed), -1)[:, None, :]  # input feeding, (B, 1, E + H)
        hc = (state.h.transpose(0, 1).contiguous(), state.c.transpose(0, 1).contiguous())
        out, (h, c) = self.decoder(x, hc)
        att = self.attend(out[:, 0], state.memory, state.memory_mask)
        state.h, state.c, state.feed = h.transpose(0, 1), c.transpose(0, 1), att
        state.step += 1
        return self.drop(att)

    def step(self, tokens: Tensor, state: RNNState) -> Tensor:
        """Feed one token per row; updates ``state``.

        Args:
            tokens: the last tokens ``(B,)``, long.
            state: the decoding state.

        Returns:
            Next-token logits ``(B, V)``.
        """
        return self.logits(self._advance(self.drop(self.tgt_embed(tokens)), state))

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor) -> Tensor:
        """Teacher-forced pass (the per-step recurrence of :meth:`step`).

        Args:
            src: long source ids ``(B, S)``.
            src_mask: ``(B, S)``, True at real source tokens.
            tgt_in: long target input ids ``(B, T)``.
            tgt_mask: ``(B, T)`` (not read: steps past a row's end come after its real ones).

        Returns:
            Logits ``(B, T, V)``.
        """
        state = self.init_state(self.encode(src, src_mask), src_mask)
        emb = self.drop(self.tgt_embed(tgt_in))  # (B, T, E)
        outs = [self._advance(emb[:, t], state) for t in range(tgt_in.shape[1])]
        return self.logits(torch.stack(outs, 1))
