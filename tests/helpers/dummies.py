"""Hand-controllable models and a word tokenizer implementing the decoding protocols.

Shape legend: B batch rows, S source length, V vocabulary, M hash buckets.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

PAD, BOS, EOS = 0, 1, 2


class TableModel(nn.Module):
    """Next-token log-probabilities looked up in ``probs[key, prev]`` (key = first source token).

    With ``noise`` ``(M, V)``, a term depending on the whole prefix (a rolling hash kept in the
    state) is added, so wrong beam reordering changes the output. ``prefix_logp`` computes the
    same distribution from an explicit prefix, without any state, for reference searches.
    """

    def __init__(self, probs: Tensor, noise: Tensor | None = None) -> None:
        super().__init__()
        self.register_buffer("table", probs.log())  # (K, V, V)
        self.register_buffer("noise", noise if noise is not None else torch.zeros(1, probs.shape[-1]))

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        return src[:, :1].clone()  # (B, 1): the key

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> dict:
        zeros = torch.zeros(memory.shape[0], dtype=torch.long, device=memory.device)
        return {"key": memory[:, 0], "hash": zeros}

    def _hash(self, h: Tensor, tokens: Tensor) -> Tensor:
        return (h * 31 + tokens + 1) % self.noise.shape[0]

    def step(self, tokens: Tensor, state: dict) -> Tensor:
        state["hash"] = self._hash(state["hash"], tokens)
        return self.table[state["key"], tokens] + self.noise[state["hash"]]

    def prefix_logp(self, key: int, prefix: list[int]) -> Tensor:
        """``(V,)`` log-probabilities of the token after BOS + ``prefix`` for source key ``key``."""
        h = torch.zeros((), dtype=torch.long)
        for tok in [BOS, *prefix]:
            h = self._hash(h, torch.tensor(tok))
        return torch.log_softmax(self.table[key, ([BOS, *prefix])[-1]] + self.noise[h], -1)


def table(rows: dict[int, dict[int, float]], vocab: int) -> Tensor:
    """``(V, V)`` next-token probabilities: given rows, uniform elsewhere."""
    probs = torch.full((vocab, vocab), 1.0 / vocab)
    for prev, dist in rows.items():
        probs[prev] = 0.0
        for tok, p in dist.items():
            probs[prev, tok] = p
    return probs


class CopyModel(nn.Module):
    """Emits its source (after an optional leading BOS) token by token: a perfect copy system."""

    def __init__(self, bos_id: int, eos_id: int, vocab: int) -> None:
        super().__init__()
        self.bos_id, self.eos_id, self.vocab = bos_id, eos_id, vocab

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        return src.masked_fill(~src_mask, self.eos_id)

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> dict:
        return {"src": memory, "t": (memory[:, 0] == self.bos_id).long()}

    def step(self, tokens: Tensor, state: dict) -> Tensor:
        src, t = state["src"], state["t"]
        nxt = src.gather(1, t.clamp(max=src.shape[1] - 1)[:, None])[:, 0]
        nxt = torch.where(t < src.shape[1], nxt, torch.full_like(nxt, self.eos_id))
        state["t"] = t + 1
        return torch.nn.functional.one_hot(nxt, self.vocab).float() * 10.0


class WordTokenizer:
    """Whitespace tokenizer over a fixed word list; ids 0-3 are pad, unk, bos, eos."""

    pad_id, unk_id, bos_id, eos_id = 0, 1, 2, 3

    def __init__(self, words: list[str]) -> None:
        self.words = ["<pad>", "<unk>", "<s>", "</s>", *words]
        self.ids = {w: i for i, w in enumerate(self.words)}
        self.vocab_size = len(self.words)

    def encode(self, text: str) -> list[int]:
        return [self.ids.get(w, self.unk_id) for w in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.words[i] for i in ids if i > self.eos_id)
