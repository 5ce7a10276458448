"""RNN-NMT: incremental decoding equals teacher forcing, padding invariance, beam reordering."""

from __future__ import annotations

import pytest
import torch

from posenc.decoding.search import reorder_state
from posenc.errors import ConfigError, DataError
from posenc.models.rnn_nmt import RNNNMT, RNNConfig


def tiny_rnn(**overrides) -> RNNNMT:
    cfg = RNNConfig(**{"hidden": 16, "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0, "vocab_size": 30, **overrides})
    return RNNNMT(cfg).eval()


def padded(seqs: list[list[int]], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.tensor([s + [0] * (length - len(s)) for s in seqs])
    return tokens, tokens != 0


def test_step_equals_forward():
    model = tiny_rnn()
    src, src_mask = padded([[5, 6, 7, 8], [9, 10]], 4)
    tgt_in, tgt_mask = padded([[2, 11, 12, 13], [2, 14, 15]], 4)
    full = model(src, src_mask, tgt_in, tgt_mask)  # (B, T, V)
    state = model.init_state(model.encode(src, src_mask), src_mask)
    steps = torch.stack([model.step(tgt_in[:, t], state) for t in range(4)], 1)
    assert full.shape == (2, 4, 30)
    torch.testing.assert_close(steps, full, rtol=1e-5, atol=1e-6)
    assert state.h.shape == (2, 2, 16) and state.c.shape == (2, 2, 16)


def test_padding_invariance():
    model = tiny_rnn()
    src = [[5, 6, 7, 8, 9], [10, 11]]
    tgt = [[2, 12, 13], [2, 14]]
    batch_src, batch_src_mask = padded(src, 7)  # extra padding beyond the longest sentence
    batch_tgt, batch_tgt_mask = padded(tgt, 3)
    memory = model.encode(batch_src, batch_src_mask)
    logits = model(batch_src, batch_src_mask, batch_tgt, batch_tgt_mask)
    assert torch.all(memory[1, 2:] == 0)  # padded positions of the packed encoder are zero
    for i in range(2):
        s, sm = padded([src[i]], len(src[i]))
        t, tm = padded([tgt[i]], len(tgt[i]))
        torch.testing.assert_close(model.encode(s, sm)[0], memory[i, : len(src[i])], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model(s, sm, t, tm)[0], logits[i, : len(tgt[i])], rtol=1e-5, atol=1e-6)


def test_initial_state_is_final_encoder_states():
    """Decoder h0 = [forward state at the last real token; backward state at the first]."""
    model = tiny_rnn(encoder_layers=1, decoder_layers=1)
    src, mask = padded([[5, 6, 7], [8, 9]], 3)
    _, (h_n, _) = model.encoder(model.src_embed(src[1:, :2]))  # unpadded second sentence
    state = model.init_state(model.encode(src, mask), mask)
    torch.testing.assert_close(state.h[1, 0], torch.cat((h_n[0, 0], h_n[1, 0])), rtol=1e-5, atol=1e-6)


def test_reorder_state_selects_beams():
    model = tiny_rnn()
    src, src_mask = padded([[5, 6, 7], [8, 9, 10]], 3)
    state = model.init_state(model.encode(src, src_mask), src_mask)
    model.step(torch.tensor([2, 2]), state)
    swapped = reorder_state(state, torch.tensor([1, 0]))
    a = model.step(torch.tensor([11, 12]), state)
    b = model.step(torch.tensor([12, 11]), swapped)
    torch.testing.assert_close(a, b.flip(0))


def test_tied_output_and_errors():
    model = tiny_rnn(share_embeddings="all")
    assert model.output is None and model.tgt_embed is model.src_embed
    with pytest.raises(ConfigError, match="vocab_size"):
        RNNNMT(RNNConfig(hidden=8))
    with pytest.raises(ConfigError, match="embed == hidden"):
        RNNConfig(hidden=8, embed=4, share_embeddings="all", vocab_size=5)
    src = torch.tensor([[5, 6], [0, 0]])
    with pytest.raises(DataError, match="length 0"):
        tiny_rnn().encode(src, src != 0)


def test_parameter_count_by_formula():
    """LSTM(i, h) has 4h(i + h) weights + 8h biases; W_c is 2H×H; embeddings and W_s V×H."""
    h, v = 16, 30
    model = tiny_rnn()

    def lstm(i: int, u: int) -> int:
        return 4 * u * (i + u) + 8 * u

    enc = 2 * lstm(h, h // 2) + 2 * lstm(h, h // 2)  # 2 layers × 2 directions
    dec = lstm(2 * h, h) + lstm(h, h)  # input feeding doubles the first layer's input
    expected = 3 * v * h + enc + dec + 2 * h * h
    assert sum(p.numel() for p in model.parameters()) == expected


def logp_of(model: RNNNMT, src: torch.Tensor, src_mask: torch.Tensor, tokens: list[int]) -> float:
    t_in = torch.tensor([[2, *tokens]])
    gold = torch.tensor([*tokens, 3])
    return torch.log_softmax(model(src, src_mask, t_in, t_in != 0)[0], -1)[torch.arange(len(gold)), gold].sum().item()


def test_works_with_the_decoders():
    """Greedy and beam search (which reorders the state) agree with teacher forcing."""
    search = pytest.importorskip("posenc.decoding.search")
    model = tiny_rnn()
    src, src_mask = padded([[5, 6, 7, 8], [9, 10]], 4)
    greedy = search.greedy_search(model, src, src_mask, bos_id=2, eos_id=3, max_len_a=0, max_len_b=6)
    beams = search.beam_search(model, src, src_mask, bos_id=2, eos_id=3, beam=3, length_penalty=0.0, max_len_a=0, max_len_b=6)
    for i, tokens in enumerate(greedy):
        s, sm = padded([[t for t in src[i].tolist() if t]], int(src_mask[i].sum()))
        prefix = torch.tensor([[2, *tokens]])
        logits = model(s, sm, prefix, prefix != 0)[0]
        assert logits[: len(tokens)].argmax(-1).tolist() == tokens
        best = beams[i][0]
        assert best.score == pytest.approx(logp_of(model, s, sm, best.tokens), abs=1e-4)  # log P(Y + EOS | X), alpha = 0
