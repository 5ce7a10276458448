"""Greedy and beam search for encoder–decoder models that decode incrementally.

Shape legend: B sentences in the batch, b sentences still decoding, K beam size,
S source length, T tokens generated so far, V vocabulary.

Model protocol (``Seq2SeqTransformer``, and any other model exposing the same methods)::

    memory = model.encode(src (B, S), src_mask (B, S))
    state  = model.init_state(memory, src_mask)    # a typed state (dataclass), batch on dim 0 of every tensor
    logits = model.step(tokens (B,), state)        # (B, V); updates ``state``

Optionally ``state = model.init_static_state(memory, src_mask, max_len)`` preallocates the
self-attention caches for ``max_len`` steps (a static KV cache written in place); the search uses it
when the model has it. Rows of a state are selected/duplicated with :func:`reorder_state`, which
is how beams are reordered.

Everything stays on the device (GPU-friendly): the batch keeps all ``B`` sentences (``B * K`` model
rows) for the whole search; a finished sentence is masked out (its rows are still computed but never
change its result) instead of leaving the batch, so there is no per-step host synchronisation
except an "all finished?" check every ``check_every`` steps. The results are exactly those of the
earlier search that dropped finished sentences (``tests/decoding/reference_search.py``).

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

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from posenc.decoding.graphs import GraphedStep
from posenc.errors import ConfigError
from posenc.models.attention import KVCache
from posenc.models.layers import BeamInvariant

__all__ = ["Hypothesis", "IncrementalModel", "beam_search", "greedy_search", "gnmt_length_penalty", "max_lengths",
           "reorder_state"]


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
    """Leave only EOS possible in rows where ``force`` (R,) is set: ``(R, V)`` → ``(R, V)`` (no host
    sync on an accelerator; on the CPU, where asking is free, rows are masked only when one is forced:
    the (R, V) mask and copy cost about 4% of a beam-4 step there, docs/perf/cpu_step.md)."""
    if scores.device.type == "cpu" and not bool(force.any()):
        return scores
    others = torch.arange(scores.shape[-1], device=scores.device) != eos_id
    return scores.masked_fill(force[:, None] & others[None, :], float("-inf"))


def _check_batch(src: Tensor, src_mask: Tensor) -> None:
    if src.dim() != 2 or src.shape != src_mask.shape:
        raise ConfigError(f"src and src_mask must both be (B, S), got {tuple(src.shape)} and {tuple(src_mask.shape)}")


class _Eager:
    """Plain ``model.step`` calls; ``state`` is the caller's (the interface of :class:`GraphedStep`)."""

    def __init__(self, model: IncrementalModel, state: Any) -> None:
        self.model, self.state = model, state

    def step(self, tokens: Tensor, state: Any) -> Tensor:
        self.state = state
        return self.model.step(tokens, state)


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


def _init_state(model: IncrementalModel, src: Tensor, src_mask: Tensor, steps: int, fixed: bool = False) -> Any:
    """Encode and build the decoding state, with a static KV cache of ``steps`` positions if supported
    (``fixed``: the fixed-shape form that CUDA graphs need)."""
    memory = model.encode(src, src_mask)
    static = getattr(model, "init_static_state", None)
    if static is None:
        return model.init_state(memory, src_mask)
    return static(memory, src_mask, steps, fixed_shapes=True) if fixed else static(memory, src_mask, steps)


def _stepper(
    model: IncrementalModel, src: Tensor, src_mask: Tensor, steps: int, rows: Tensor, graph: bool
) -> _Eager | GraphedStep:
    """The step runner over the initial state expanded to ``rows`` (``(N,)`` source rows).

    ``graph``: fixed shapes, captured as a CUDA graph on CUDA (run eagerly elsewhere); if the model
    has no fixed-shape state or capturing fails, plain eager steps (with a warning for the latter).
    """
    tokens = torch.zeros_like(rows)
    if graph and getattr(model, "init_static_state", None) is not None:
        state = reorder_state(_init_state(model, src, src_mask, steps, fixed=True), rows)
        try:
            return GraphedStep(model, state, tokens)
        except RuntimeError as err:  # e.g. a host sync inside the step
            warnings.warn(f"CUDA graph capture failed ({err}); decoding without graphs", stacklevel=3)
    return _Eager(model, reorder_state(_init_state(model, src, src_mask, steps), rows))


def _all_done(active: Tensor, t: int, check_every: int) -> bool:
    """The cheap periodic host check: every ``check_every`` steps, is no sentence active?"""
    return (t + 1) % check_every == 0 and not bool(active.any())


@torch.no_grad()
def greedy_search(
    model: IncrementalModel,
    src: Tensor,
    src_mask: Tensor,
    bos_id: int,
    eos_id: int,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    check_every: int = 4,
    cuda_graph: bool = False,
) -> list[list[int]]:
    """Arg-max decoding of a batch ``src`` ``(B, S)``, all sentences as one batch on the device.

    ``cuda_graph``: replay one captured step (see :func:`beam_search`).
    Returns B token lists (no BOS/EOS), in the order of ``src``.
    """
    _check_batch(src, src_mask)
    if src.shape[0] == 0:
        return []
    limit = max_lengths(src_mask, max_len_a, max_len_b)  # (B,)
    steps = int(limit.max()) + 1  # the one host sync before the loop
    stepper = _stepper(model, src, src_mask, steps, torch.arange(src.shape[0], device=src.device), cuda_graph)
    state = stepper.state
    tokens = torch.full((src.shape[0],), bos_id, dtype=torch.long, device=src.device)
    out = tokens.new_zeros(src.shape[0], steps)  # (B, T_max) every step's arg-max
    lengths, active = limit.clone(), torch.ones_like(tokens, dtype=torch.bool)
    for t in range(steps):
        tokens = _force_eos(stepper.step(tokens, state), t >= limit, eos_id).argmax(-1)
        out[:, t] = tokens
        ended = active & (tokens == eos_id)
        lengths = torch.where(ended, t, lengths)
        active &= ~ended
        if _all_done(active, t, check_every):
            break
    return [row[:n] for row, n in zip(out.tolist(), lengths.tolist())]


class _Finished:
    """Finished hypotheses of B sentences, at most K each, as tensors (one spare slot K that
    absorbs writes of candidates that are not stored, so no host-side selection is needed).

    tokens ``(B, K+1, Tmax)``, lengths ``(B, K+1)``, scores ``(B, K+1)`` (``-inf`` = empty slot),
    count ``(B,)``.
    """

    def __init__(self, bsz: int, k: int, max_len: int, device: torch.device) -> None:
        self.k = k
        self.tokens = torch.zeros(bsz, k + 1, max_len, dtype=torch.long, device=device)
        self.lengths = torch.zeros(bsz, k + 1, dtype=torch.long, device=device)
        self.scores = torch.full((bsz, k + 1), float("-inf"), device=device)
        self.count = torch.zeros(bsz, dtype=torch.long, device=device)

    def add(self, active: Tensor, paths: Tensor, cand: Tensor, is_eos: Tensor, t: int, alpha: float) -> None:
        """Store EOS candidates among the first K (in rank order, while slots remain) of active sentences.

        active ``(B,)``, paths ``(B, K, Tmax)`` prefixes (the first ``t`` tokens count), cand ``(B, K)``
        cumulative log-probs (sorted descending), is_eos ``(B, K)``.
        """
        new = is_eos & torch.isfinite(cand) & active[:, None]
        slot = self.count[:, None] + new.cumsum(1) - 1
        new &= slot < self.k
        slot = torch.where(new, slot, self.k)  # (B, K); the spare slot K takes the rest
        self.tokens.scatter_(1, slot[:, :, None].expand_as(paths), paths)
        self.lengths.scatter_(1, slot, torch.full_like(slot, t))
        self.scores.scatter_(1, slot, cand / gnmt_length_penalty(t + 1, alpha))
        self.count += new.sum(1)

    def best(self, n_best: int) -> list[list[Hypothesis]]:
        """Per sentence, up to ``n_best`` hypotheses by descending score (earlier slot on ties)."""
        k = self.k
        scores, order = self.scores[:, :k].sort(dim=1, descending=True, stable=True)
        tokens = self.tokens[:, :k].gather(1, order[:, :, None].expand(-1, -1, self.tokens.shape[2])).tolist()
        lengths = self.lengths[:, :k].gather(1, order).tolist()
        out = []
        for sent_scores, sent_tokens, sent_lengths in zip(scores.tolist(), tokens, lengths):
            n = sum(1 for s in sent_scores[:n_best] if s != float("-inf"))
            out.append([Hypothesis(sent_tokens[j][: sent_lengths[j]], sent_scores[j]) for j in range(n)])
        return out


def _check_beam_args(beam: int, n_best: int, check_every: int = 1) -> None:
    if beam < 1:
        raise ConfigError(f"beam must be >= 1, got {beam}")
    if not 1 <= n_best <= beam:
        raise ConfigError(f"n_best must be in [1, beam={beam}], got {n_best}")
    if check_every < 1:
        raise ConfigError(f"check_every must be >= 1, got {check_every}")


def _top_candidates(scores: Tensor, logp: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """Best ``2K`` continuations per sentence: scores ``(B, K)``, logp ``(B*K, V)`` →
    cumulative log-probs, origin beams, tokens, each ``(B, 2K)``, best first."""
    vocab = logp.shape[-1]
    cand = (scores[:, :, None] + logp.view(-1, k, vocab)).view(-1, k * vocab)
    cand, flat = cand.topk(min(2 * k, k * vocab), dim=1)
    return cand, flat // vocab, flat % vocab


@dataclass
class _Beams:
    """The live beams of all B sentences: scores ``(B, K)``, token history ``(B, K, Tmax)``, active ``(B,)``."""

    scores: Tensor
    hist: Tensor
    active: Tensor

    @classmethod
    def start(cls, bsz: int, k: int, steps: int, device: torch.device) -> _Beams:
        scores = torch.zeros(bsz, k, device=device)
        scores[:, 1:] = float("-inf")  # all beams start identical: expand only the first one
        hist = torch.zeros(bsz, k, steps, dtype=torch.long, device=device)
        return cls(scores, hist, torch.ones(bsz, dtype=torch.bool, device=device))

    def select(self, cand: Tensor, origin: Tensor, token: Tensor, is_eos: Tensor, t: int) -> Tensor:
        """Keep the K best non-EOS continuations (a stable sort moves EOS ones last); returns origins ``(B, K)``."""
        k = self.scores.shape[1]
        sel = is_eos.to(torch.uint8).argsort(dim=1, stable=True)[:, :k]  # (B, K)
        self.scores, origin, token = cand.gather(1, sel), origin.gather(1, sel), token.gather(1, sel)
        self.hist = self.hist.gather(1, origin[:, :, None].expand_as(self.hist))
        self.hist[:, :, t] = token
        return origin


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
    check_every: int = 4,
    cuda_graph: bool = False,
) -> list[list[Hypothesis]]:
    """Batched beam search (B sentences × K beams as ``B*K`` model rows); see the module doc.

    Args:
        src, src_mask: ``(B, S)`` source tokens and mask (True = real token).
        length_penalty: GNMT ``alpha`` (0 = unnormalised log-probability).
        n_best: hypotheses returned per sentence (``<= beam``).
        check_every: steps between the host-side "all sentences finished?" checks.
        cuda_graph: decode with a fixed-shape state (``init_static_state(..., fixed_shapes=True)``)
            whose step is captured once as a CUDA graph and replayed (on CUDA; run eagerly on CPU).

    Returns:
        B lists of up to ``n_best`` :class:`Hypothesis`, best first (fewer only when the
        maximum length cut the search before ``n_best`` hypotheses with finite score finished).
    """
    _check_beam_args(beam, n_best, check_every)
    _check_batch(src, src_mask)
    bsz, k, device = src.shape[0], beam, src.device
    if bsz == 0:
        return []
    limit = max_lengths(src_mask, max_len_a, max_len_b)  # (B,)
    steps = int(limit.max()) + 1  # the one host sync before the loop
    stepper = _stepper(model, src, src_mask, steps, torch.arange(bsz, device=device)[:, None].expand(-1, k).reshape(-1),
                       cuda_graph)
    state = stepper.state
    finished = _Finished(bsz, k, steps, device)
    beams = _Beams.start(bsz, k, steps, device)
    group = torch.arange(bsz, device=device)[:, None] * k  # (B, 1) first row of each sentence
    tokens = torch.full((bsz * k,), bos_id, dtype=torch.long, device=device)
    for t in range(steps):
        force = t >= limit  # (B,)
        logp = torch.log_softmax(stepper.step(tokens, state).float(), -1)  # (B*K, V)
        cand, origin, token = _top_candidates(
            beams.scores, _force_eos(logp, force[:, None].expand(-1, k).reshape(-1), eos_id), k)
        is_eos = token == eos_id
        paths = beams.hist.gather(1, origin[:, :k, None].expand(-1, -1, steps))  # (B, K, Tmax)
        finished.add(beams.active, paths, cand[:, :k], is_eos[:, :k], t, length_penalty)
        origin = beams.select(cand, origin, token, is_eos, t)
        beams.active &= (finished.count < k) & ~force
        state = reorder_state(stepper.state, (group + origin).view(-1), within_groups=True)
        tokens = beams.hist[:, :, t].reshape(-1)
        if _all_done(beams.active, t, check_every):
            break
    return finished.best(n_best)
