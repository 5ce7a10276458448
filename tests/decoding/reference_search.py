"""The previous (per-step host-synchronising) greedy and beam search, kept verbatim as the
reference the batched static-cache search in ``posenc.decoding.search`` must reproduce exactly.
It drops finished sentences from the batch and uses the models' growing (``torch.cat``) caches.

Shape legend: B sentences in the batch, b sentences still decoding, K beam size,
S source length, T tokens generated so far, V vocabulary.

Model protocol (``Seq2SeqTransformer``, and any other model exposing the same methods)::

    memory = model.encode(src (B, S), src_mask (B, S))
    state  = model.init_state(memory, src_mask)    # nested dict/list of tensors, batch on dim 0
    logits = model.step(tokens (B,), state)        # (B, V); updates ``state``

Rows of a state are selected/duplicated with :func:`posenc.decoding.search.reorder_state`,
which is how beams are reordered and how finished sentences are dropped from the batch.

Output conventions (both searches):

* hypotheses exclude BOS and EOS;
* the maximum output length of sentence i is ``floor(max_len_a * |src_i| + max_len_b)``
  tokens, ``|src_i|`` counting the real (unmasked) source tokens; at that length EOS is forced;
* the model is used as it is (call ``model.eval()`` first; no gradients are tracked).

Beam search scoring follows GNMT (Wu et al. 2016, §7), the setting used by Shaw et al. (2018):
``score(Y) = log P(Y | X) / lp(Y)`` with ``lp(Y) = ((5 + |Y|) / 6) ** alpha``, where log P sums
the log-probabilities of every predicted token including EOS and ``|Y|`` counts them
(hypothesis tokens + 1). The coverage penalty of GNMT is not used (Shaw et al. do not use it).

Beam stopping rule (the one fairseq uses): each step ranks the ``2K`` best continuations
(cumulative log-probabilities) of a sentence; an EOS continuation among the first ``K`` of them
becomes a finished hypothesis, and the ``K`` best non-EOS continuations stay alive. A sentence is
done once it has ``K`` finished hypotheses, or when it reaches its maximum length (EOS forced for
every beam). A longer hypothesis that might still have overtaken a finished one after length
normalisation is not searched for. With ``K = 1`` this reduces exactly to greedy search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from posenc.decoding.search import reorder_state
from posenc.errors import ConfigError

__all__ = ["Hypothesis", "IncrementalModel", "beam_search", "greedy_search", "gnmt_length_penalty", "max_lengths"]


class IncrementalModel(Protocol):
    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor: ...

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> Any: ...

    def step(self, tokens: Tensor, state: Any) -> Tensor: ...


@dataclass(frozen=True)
class Hypothesis:
    """A finished hypothesis: tokens without BOS/EOS, length-normalised log-probability."""

    tokens: list[int]
    score: float


def gnmt_length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT length penalty ``((5 + |Y|) / 6) ** alpha`` (Wu et al. 2016, eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src_mask: Tensor, a: float, b: float) -> Tensor:
    """Per-sentence output length limits ``floor(a * |src| + b)``: ``(B, S)`` bool → ``(B,)`` long."""
    if a < 0 or b < 0:
        raise ConfigError(f"max_len_a and max_len_b must be >= 0, got {a} and {b}")
    lengths = src_mask.sum(1).to(torch.float64)
    return (a * lengths + b).floor().long()


def _force_eos(scores: Tensor, force: Tensor, eos_id: int) -> Tensor:
    """Leave only EOS possible in rows where ``force`` (R,) is set: ``(R, V)`` → ``(R, V)``."""
    if not bool(force.any()):
        return scores
    others = torch.ones(scores.shape[-1], dtype=torch.bool, device=scores.device)
    others[eos_id] = False
    return scores.masked_fill(force[:, None] & others[None, :], float("-inf"))


def _check_batch(src: Tensor, src_mask: Tensor) -> None:
    if src.dim() != 2 or src.shape != src_mask.shape:
        raise ConfigError(f"src and src_mask must both be (B, S), got {tuple(src.shape)} and {tuple(src_mask.shape)}")


@torch.no_grad()
def greedy_search(
    model: IncrementalModel,
    src: Tensor,
    src_mask: Tensor,
    bos_id: int,
    eos_id: int,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
) -> list[list[int]]:
    """Arg-max decoding of a batch ``src`` ``(B, S)``; finished sentences leave the batch.

    Returns B token lists (no BOS/EOS), in the order of ``src``.
    """
    _check_batch(src, src_mask)
    limit = max_lengths(src_mask, max_len_a, max_len_b)
    state = model.init_state(model.encode(src, src_mask), src_mask)
    alive = torch.arange(src.shape[0], device=src.device)  # (b,) original sentence of each row
    tokens = torch.full_like(alive, bos_id)
    hist = alive.new_empty(alive.shape[0], 0)  # (b, T)
    out: list[list[int]] = [[] for _ in range(src.shape[0])]
    t = 0
    while alive.numel():
        logits = _force_eos(model.step(tokens, state), t >= limit[alive], eos_id)
        tokens = logits.argmax(-1)
        done = tokens == eos_id
        if bool(done.any()):
            rows = done.nonzero().squeeze(1)
            for sent, toks in zip(alive[rows].tolist(), hist[rows].tolist()):
                out[sent] = toks
            keep = (~done).nonzero().squeeze(1)
            alive, tokens, hist = alive[keep], tokens[keep], hist[keep]
            state = reorder_state(state, keep)
        hist = torch.cat((hist, tokens[:, None]), 1)
        t += 1
    return out


class _Finished:
    """Finished hypotheses of B sentences, at most K each, as tensors.

    tokens ``(B, K, Tmax)``, lengths ``(B, K)``, scores ``(B, K)`` (``-inf`` = empty slot),
    count ``(B,)``.
    """

    def __init__(self, bsz: int, k: int, max_len: int, device: torch.device) -> None:
        self.k = k
        self.tokens = torch.zeros(bsz, k, max_len, dtype=torch.long, device=device)
        self.lengths = torch.zeros(bsz, k, dtype=torch.long, device=device)
        self.scores = torch.full((bsz, k), float("-inf"), device=device)
        self.count = torch.zeros(bsz, dtype=torch.long, device=device)

    def add(self, alive: Tensor, paths: Tensor, cand: Tensor, is_eos: Tensor, t: int, alpha: float) -> None:
        """Store EOS candidates ranked in the first K (in rank order, while slots remain).

        alive ``(b,)``, paths ``(b, 2K, T)`` prefixes, cand ``(b, 2K)`` cumulative log-probs
        (sorted descending), is_eos ``(b, 2K)``; ``T = t`` tokens precede the EOS.
        """
        new = is_eos & torch.isfinite(cand)
        new[:, self.k :] = False
        slot = self.count[alive][:, None] + new.cumsum(1) - 1
        new &= slot < self.k
        if not bool(new.any()):
            return
        r, c = new.nonzero(as_tuple=True)
        sent, s = alive[r], slot[r, c]
        self.tokens[sent, s, :t] = paths[r, c]
        self.lengths[sent, s] = t
        self.scores[sent, s] = cand[r, c] / gnmt_length_penalty(t + 1, alpha)
        self.count[alive] += new.sum(1)

    def best(self, n_best: int) -> list[list[Hypothesis]]:
        """Per sentence, up to ``n_best`` hypotheses by descending score (earlier slot on ties)."""
        scores, order = self.scores.sort(dim=1, descending=True, stable=True)
        tokens = self.tokens.gather(1, order[:, :, None].expand_as(self.tokens)).tolist()
        lengths = self.lengths.gather(1, order).tolist()
        out = []
        for sent_scores, sent_tokens, sent_lengths in zip(scores.tolist(), tokens, lengths):
            n = sum(1 for s in sent_scores[:n_best] if s != float("-inf"))
            out.append([Hypothesis(sent_tokens[j][: sent_lengths[j]], sent_scores[j]) for j in range(n)])
        return out


def _check_beam_args(beam: int, n_best: int) -> None:
    if beam < 1:
        raise ConfigError(f"beam must be >= 1, got {beam}")
    if not 1 <= n_best <= beam:
        raise ConfigError(f"n_best must be in [1, beam={beam}], got {n_best}")


@torch.no_grad()
def beam_search(
    model: IncrementalModel,
    src: Tensor,
    src_mask: Tensor,
    bos_id: int,
    eos_id: int,
    beam: int = 4,
    length_penalty: float = 0.6,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    n_best: int = 1,
) -> list[list[Hypothesis]]:
    """Batched beam search (B sentences × K beams as ``B*K`` model rows); see the module doc.

    Args:
        src, src_mask: ``(B, S)`` source tokens and mask (True = real token).
        length_penalty: GNMT ``alpha`` (0 = unnormalised log-probability).
        n_best: hypotheses returned per sentence (``<= beam``).

    Returns:
        B lists of up to ``n_best`` :class:`Hypothesis`, best first (fewer only when the
        maximum length cut the search before ``n_best`` hypotheses with finite score finished).
    """
    _check_beam_args(beam, n_best)
    _check_batch(src, src_mask)
    bsz, k, device = src.shape[0], beam, src.device
    limit = max_lengths(src_mask, max_len_a, max_len_b)
    finished = _Finished(bsz, k, int(limit.max()) if bsz else 0, device)
    state = model.init_state(model.encode(src, src_mask), src_mask)
    state = reorder_state(state, torch.arange(bsz, device=device).repeat_interleave(k))
    alive = torch.arange(bsz, device=device)  # (b,) original sentence of each row group
    scores = torch.zeros(bsz, k, device=device)  # (b, K) cumulative log-probabilities
    scores[:, 1:] = float("-inf")  # all beams start identical: expand only the first one
    hist = alive.new_empty(bsz, k, 0)  # (b, K, T)
    tokens = torch.full((bsz * k,), bos_id, dtype=torch.long, device=device)
    t = 0
    while alive.numel():
        force = t >= limit[alive]  # (b,)
        logp = torch.log_softmax(model.step(tokens, state).float(), -1)  # (b*K, V)
        logp = _force_eos(logp, force.repeat_interleave(k), eos_id)
        vocab = logp.shape[-1]
        cand = (scores[:, :, None] + logp.view(-1, k, vocab)).view(-1, k * vocab)
        cand, flat = cand.topk(min(2 * k, k * vocab), dim=1)  # (b, 2K), best first
        origin, token = flat // vocab, flat % vocab
        paths = hist.gather(1, origin[:, :, None].expand(-1, -1, t))  # (b, 2K, T)
        is_eos = token == eos_id
        finished.add(alive, paths, cand, is_eos, t, length_penalty)
        # The K best non-EOS continuations stay alive (a stable sort moves EOS ones last).
        sel = is_eos.to(torch.uint8).argsort(dim=1, stable=True)[:, :k]  # (b, K)
        scores, origin, token = cand.gather(1, sel), origin.gather(1, sel), token.gather(1, sel)
        hist = torch.cat((paths.gather(1, sel[:, :, None].expand(-1, -1, t)), token[:, :, None]), 2)
        keep = ((finished.count[alive] < k) & ~force).nonzero().squeeze(1)
        rows = (keep[:, None] * k + origin[keep]).view(-1)  # state rows that continue, (b'*K,)
        state = reorder_state(state, rows)
        alive, scores, hist = alive[keep], scores[keep], hist[keep]
        tokens = hist[:, :, -1].reshape(-1)
        t += 1
    return finished.best(n_best)
