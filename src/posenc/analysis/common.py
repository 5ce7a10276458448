"""Helpers shared by the analyses: length/frequency buckets, BLEU, input checks, padding and
teacher-forced gold-token log-probabilities.

Shape legend: B batch, S source length, T target length (+1 for BOS/EOS), V vocabulary.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import sacrebleu
import torch
from torch import Tensor, nn

from posenc.errors import DataError

Translate = Callable[[list[str]], list[str]]


@dataclass(frozen=True)
class Buckets:
    """Integer buckets given by increasing lower bounds; the last bucket is open-ended.

    ``Buckets((0, 10, 20))`` has buckets ``0-9``, ``10-19`` and ``20-`` (Neishi Fig. 3 style).

    Args:
        edges: the buckets' lower bounds, strictly increasing (integers; a list is taken as a tuple).

    Raises:
        DataError: ``edges`` is empty or not increasing.
    """

    edges: tuple[int, ...]

    def __post_init__(self) -> None:
        e = tuple(int(x) for x in self.edges)
        if not e or any(b <= a for a, b in zip(e, e[1:])):
            raise DataError(f"bucket edges must be a non-empty increasing list, got {list(self.edges)}")
        object.__setattr__(self, "edges", e)

    @classmethod
    def uniform(cls, width: int, last: int, first: int = 0) -> Buckets:
        """Buckets of one width.

        Args:
            width: each bucket's width, >= 1.
            last: where the open-ended last bucket starts (the range ``first..last`` gives the edges).
            first: the lower bound of the first bucket.

        Returns:
            Buckets with edges ``first, first + width, ...`` up to ``last``.

        Raises:
            DataError: ``width`` < 1.
        """
        if width < 1:
            raise DataError(f"bucket width must be >= 1, got {width}")
        return cls(tuple(range(first, last + 1, width)))

    @classmethod
    def parse(cls, text: str) -> Buckets:
        """Buckets from their edges as text (``"0,10,20"`` → ``Buckets((0, 10, 20))``).

        Args:
            text: comma-separated integer lower bounds (empty items are skipped).

        Returns:
            The buckets.

        Raises:
            DataError: an item is not an integer, or the edges are not increasing.
        """
        try:
            return cls(tuple(int(t) for t in text.split(",") if t.strip()))
        except ValueError:
            raise DataError(f"bucket edges {text!r}: expected comma-separated integers") from None

    def __len__(self) -> int:
        return len(self.edges)

    def labels(self) -> list[str]:
        """The buckets' labels for tables and plots.

        Returns:
            One label per bucket: ``lo-hi`` (both inclusive), ``lo`` for a one-value bucket and ``lo-``
            for the open-ended last one.
        """
        out = [f"{lo}-{hi - 1}" if hi - 1 != lo else str(lo) for lo, hi in zip(self.edges, self.edges[1:])]
        return out + [f"{self.edges[-1]}-"]

    def index(self, value: float) -> int:
        """The bucket ``value`` falls in.

        Args:
            value: a length, rank or position, at least the first edge.

        Returns:
            The bucket's index (0-based).

        Raises:
            DataError: ``value`` is below the first edge.
        """
        i = bisect.bisect_right(self.edges, value) - 1
        if i < 0:
            raise DataError(f"value {value} is below the first bucket edge {self.edges[0]}")
        return i

    def assign(self, values: Iterable[float]) -> list[int]:
        """The bucket of each value (:meth:`index` of each).

        Args:
            values: lengths, ranks or positions, each at least the first edge.

        Returns:
            One bucket index per value, in order.
        """
        return [self.index(v) for v in values]

    def counts(self, values: Iterable[float]) -> list[int]:
        """How many values fall in each bucket.

        Args:
            values: lengths, ranks or positions, each at least the first edge.

        Returns:
            The number of ``values`` per bucket, one count per bucket.
        """
        out = [0] * len(self)
        for i in self.assign(values):
            out[i] += 1
        return out


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str], tokenize: str = "13a") -> float | None:
    """sacreBLEU corpus score of hypotheses against one reference each.

    Args:
        hyps: the detokenized outputs.
        refs: the detokenized references, one per hypothesis, in the same order.
        tokenize: sacreBLEU's tokenizer (``13a``, ``intl``, ``zh``, ...).

    Returns:
        The BLEU score (0-100), or ``None`` for an empty set.
    """
    if not hyps:
        return None
    return float(sacrebleu.BLEU(tokenize=tokenize).corpus_score(list(hyps), [list(refs)]).score)


def check_same_length(what: str, items: Sequence[Any], expected: int, of: str) -> None:
    """Refuse inputs of different lengths that must align item for item.

    Args:
        what: the input named by the error (e.g. ``hyps[ape]``).
        items: its items.
        expected: how many there must be.
        of: what ``expected`` counts, named by the error (e.g. ``references``).

    Raises:
        DataError: ``len(items) != expected``.
    """
    if len(items) != expected:
        raise DataError(f"{what}: {len(items)} items but {expected} {of}")


def pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Right-pad id lists into one batch.

    Args:
        seqs: B token-id lists (any lengths; empty ones allowed).
        pad_id: the id filling the padding.

    Returns:
        ``(tokens, mask)``: tokens ``(B, L)`` long and mask ``(B, L)`` bool (True = real token),
        ``L`` the longest list's length (at least 1).
    """
    length = max((len(s) for s in seqs), default=0)
    tokens = torch.full((len(seqs), max(length, 1)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = True
    return tokens, mask


def model_device(model: nn.Module) -> torch.device:
    """The device a model's weights are on.

    Args:
        model: a module with at least one parameter.

    Returns:
        The device of its first parameter.
    """
    return next(model.parameters()).device


@torch.no_grad()
def gold_logprobs(
    model: nn.Module,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    bos_id: int,
    eos_id: int,
    pad_id: int = 0,
    batch_size: int = 32,
) -> list[np.ndarray]:
    """Teacher-forced log p(y_j | y_<j, X) of every gold token, EOS included.

    The decoder input is BOS + target and the gold output target + EOS. The model is put in eval
    mode; pairs are batched by length, and the result is in the order of ``pairs``.

    Args:
        model: a sequence-to-sequence model called as ``model(src, src_mask, tgt_in, tgt_mask)``
            → logits ``(B, T, V)``.
        pairs: (source ids, target ids) per sentence, without BOS/EOS on the target.
        bos_id: the BOS id prefixed to the decoder input.
        eos_id: the EOS id appended to the gold output.
        pad_id: the padding id.
        batch_size: pairs per forward pass.

    Returns:
        Per pair, a float64 array of length ``len(target) + 1`` (decoder positions 1..T+1).
    """
    model.eval()
    device = model_device(model)
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]), len(pairs[i][1])))
    out: list[np.ndarray] = [np.empty(0)] * len(pairs)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        src, src_mask = pad([pairs[i][0] for i in idx], pad_id)
        tgt_in, tgt_mask = pad([[bos_id, *pairs[i][1]] for i in idx], pad_id)
        gold, _ = pad([[*pairs[i][1], eos_id] for i in idx], pad_id)
        logits = model(src.to(device), src_mask.to(device), tgt_in.to(device), tgt_mask.to(device))
        logp = torch.log_softmax(logits.double(), -1).gather(-1, gold.to(device)[..., None])[..., 0]
        for row, i in enumerate(idx):
            out[i] = logp[row, : len(pairs[i][1]) + 1].cpu().numpy()
    return out
