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
    """

    edges: tuple[int, ...]

    def __post_init__(self) -> None:
        e = tuple(int(x) for x in self.edges)
        if not e or any(b <= a for a, b in zip(e, e[1:])):
            raise DataError(f"bucket edges must be a non-empty increasing list, got {list(self.edges)}")
        object.__setattr__(self, "edges", e)

    @classmethod
    def uniform(cls, width: int, last: int, first: int = 0) -> Buckets:
        """Buckets of ``width`` from ``first``; the open-ended last one starts at ``last``."""
        if width < 1:
            raise DataError(f"bucket width must be >= 1, got {width}")
        return cls(tuple(range(first, last + 1, width)))

    @classmethod
    def parse(cls, text: str) -> Buckets:
        """``"0,10,20"`` → ``Buckets((0, 10, 20))``."""
        try:
            return cls(tuple(int(t) for t in text.split(",") if t.strip()))
        except ValueError:
            raise DataError(f"bucket edges {text!r}: expected comma-separated integers") from None

    def __len__(self) -> int:
        return len(self.edges)

    def labels(self) -> list[str]:
        out = [f"{lo}-{hi - 1}" if hi - 1 != lo else str(lo) for lo, hi in zip(self.edges, self.edges[1:])]
        return out + [f"{self.edges[-1]}-"]

    def index(self, value: float) -> int:
        """Bucket index of ``value``; values below the first edge are an error."""
        i = bisect.bisect_right(self.edges, value) - 1
        if i < 0:
            raise DataError(f"value {value} is below the first bucket edge {self.edges[0]}")
        return i

    def assign(self, values: Iterable[float]) -> list[int]:
        return [self.index(v) for v in values]

    def counts(self, values: Iterable[float]) -> list[int]:
        """Number of ``values`` per bucket."""
        out = [0] * len(self)
        for i in self.assign(values):
            out[i] += 1
        return out


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str], tokenize: str = "13a") -> float | None:
    """sacreBLEU corpus score (``None`` for an empty set)."""
    if not hyps:
        return None
    return float(sacrebleu.BLEU(tokenize=tokenize).corpus_score(list(hyps), [list(refs)]).score)


def check_same_length(what: str, items: Sequence[Any], expected: int, of: str) -> None:
    if len(items) != expected:
        raise DataError(f"{what}: {len(items)} items but {expected} {of}")


def pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Right-pad id lists → tokens ``(B, L)`` long and mask ``(B, L)`` bool (True = real)."""
    length = max((len(s) for s in seqs), default=0)
    tokens = torch.full((len(seqs), max(length, 1)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = True
    return tokens, mask


def model_device(model: nn.Module) -> torch.device:
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

    ``pairs`` are (source ids, target ids) without BOS/EOS on the target; the decoder input is
    BOS + target and the gold output target + EOS. Returns, per pair, a float64 array of
    length ``len(target) + 1`` (decoder positions 1..T+1). The model is put in eval mode.
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
