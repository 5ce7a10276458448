"""Padding sequences into :class:`Batch` tensors and grouping examples into token-bounded batches."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from posenc.errors import ConfigError, DataError

__all__ = ["Batch", "bucket_length", "bucket_rows", "collate", "token_batches"]

#: Static shapes for a captured training step (``train.compile: reduce-overhead``): every length is
#: padded up to a multiple of this, ...
LENGTH_MULTIPLE = 8
#: ... and the row count up to the next of 8, 16, 24, 32, 40, 48, 64, ...: multiples of 8 growing by
#: by at most this factor (+ 8 for the rounding): at most 19 % + 8 padded rows; a length bucket sees
#: two or three row counts.
ROW_GROWTH = 2 ** 0.25


def bucket_length(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`LENGTH_MULTIPLE` (at least one multiple)."""
    return max(LENGTH_MULTIPLE, -(-n // LENGTH_MULTIPLE) * LENGTH_MULTIPLE)


def bucket_rows(n: int) -> int:
    """The smallest row bucket (8, 16, 24, ..., see :data:`ROW_GROWTH`) holding ``n`` rows."""
    rows = 8
    while rows < n:
        rows = max(rows + 8, math.ceil(rows * ROW_GROWTH / 8) * 8)
    return rows


def pad_to(t: torch.Tensor, rows: int, length: int, value: float | bool) -> torch.Tensor:
    """``t (B, L)`` right- and bottom-padded with ``value`` to ``(rows, length)``."""
    out = t.new_full((rows, length), value)
    out[: t.shape[0], : t.shape[1]] = t
    return out


@dataclass
class Batch:
    """A right-padded batch of B sentence pairs.

    Attributes:
        src: (B, Ls) long source ids (optionally BOS first), padded with pad_id.
        tgt_in: (B, Lt) long decoder input: BOS + target ids.
        tgt_out: (B, Lt) long decoder output: target ids + EOS.
        src_mask: (B, Ls) bool, True for real (non-pad) source positions.
        tgt_mask: (B, Lt) bool, True for real target positions (same for tgt_in and tgt_out).
        ntokens: number of real target tokens, i.e. ``tgt_mask.sum()`` (EOS included).
        indices: B original example indices, in row order.
        pad_id: the id of the padding (what the loss ignores in ``tgt_out``).
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    src_mask: torch.Tensor
    tgt_mask: torch.Tensor
    ntokens: int
    indices: list[int]
    pad_id: int = 0

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Return a copy with all tensors on ``device``."""
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        return Batch(move(self.src), move(self.tgt_in), move(self.tgt_out), move(self.src_mask),
                     move(self.tgt_mask), self.ntokens, list(self.indices), self.pad_id)

    def __len__(self) -> int:
        return self.src.size(0)

    def bucketed(self) -> Batch:
        """This batch padded to a static shape (:func:`bucket_rows`, :func:`bucket_length` of each
        side) for a captured step; the loss and its gradients are unchanged. Padded positions are
        ``pad_id`` under a False mask; a padded row has one unmasked pad token on each side (no
        attention row with every key masked, whose softmax would be NaN) and a target of pads only,
        which the loss ignores. ``ntokens`` and ``indices`` stay those of the real rows."""
        rows = bucket_rows(len(self))
        ls, lt = bucket_length(self.src.shape[1]), bucket_length(self.tgt_in.shape[1])
        src_mask, tgt_mask = pad_to(self.src_mask, rows, ls, False), pad_to(self.tgt_mask, rows, lt, False)
        src_mask[len(self):, 0] = tgt_mask[len(self):, 0] = True
        return Batch(pad_to(self.src, rows, ls, self.pad_id), pad_to(self.tgt_in, rows, lt, self.pad_id),
                     pad_to(self.tgt_out, rows, lt, self.pad_id), src_mask, tgt_mask, self.ntokens,
                     list(self.indices), self.pad_id)


def _pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ``rows`` -> (ids (B, L) long, mask (B, L) bool); L = longest row (>= 1)."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    width = max(int(lengths.max()), 1) if len(rows) else 1
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        if len(row):
            ids[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    return ids, mask


def collate(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    pad_id: int,
    bos_id: int,
    eos_id: int,
    indices: Sequence[int],
    prepend_src_bos: bool = False,
) -> Batch:
    """Build a right-padded :class:`Batch` from B token-id lists (no specials in the inputs).

    ``tgt_in`` = [BOS] + tgt, ``tgt_out`` = tgt + [EOS]; the source is used as given, with a
    BOS in front when ``prepend_src_bos``. An empty source (with no BOS) is an error since it
    would leave nothing to attend to; an empty target gives tgt_in=[BOS], tgt_out=[EOS].
    """
    if not (len(src_ids) == len(tgt_ids) == len(indices)):
        raise ValueError(
            f"collate: {len(src_ids)} sources, {len(tgt_ids)} targets, {len(indices)} indices"
        )
    if len(src_ids) == 0:
        raise ValueError("collate: empty batch")
    src_rows = [[bos_id, *s] if prepend_src_bos else list(s) for s in src_ids]
    for row, index in zip(src_rows, indices):
        if not row:
            raise DataError(f"example {index}: empty source sequence")
    src, src_mask = _pad(src_rows, pad_id)
    tgt_in, tgt_mask = _pad([[bos_id, *t] for t in tgt_ids], pad_id)
    tgt_out, _ = _pad([[*t, eos_id] for t in tgt_ids], pad_id)
    return Batch(src, tgt_in, tgt_out, src_mask, tgt_mask, int(tgt_mask.sum()),
                 [int(i) for i in indices], pad_id)


def _length_order(src_lens: Sequence[int], tgt_lens: Sequence[int],
                  rng: np.random.Generator | None) -> list[int]:
    """Indices sorted by (max(src, tgt), src, tgt); ties broken randomly when ``rng`` is given."""
    n = len(src_lens)
    tie = rng.permutation(n) if rng is not None else np.arange(n)
    keys = [(max(s, t), s, t, int(r)) for s, t, r in zip(src_lens, tgt_lens, tie)]
    return sorted(range(n), key=keys.__getitem__)


def _pack(order: list[int], sizes: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Greedy packing in ``order`` so that len(batch) * max(size in batch) <= max_tokens.

    An example whose size alone exceeds ``max_tokens`` gets a batch of its own.
    """
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        new_width = max(width, sizes[i])
        if current and (len(current) + 1) * new_width > max_tokens:
            batches.append(current)
            current, new_width = [], sizes[i]
        current.append(i)
        width = new_width
    if current:
        batches.append(current)
    return batches


def _check_batch_args(src_lens: Sequence[int], tgt_lens: Sequence[int], max_tokens: int,
                      seed: int, epoch: int, rank: int, world_size: int) -> None:
    if len(src_lens) != len(tgt_lens):
        raise ValueError(f"token_batches: {len(src_lens)} source lengths, {len(tgt_lens)} target lengths")
    if max_tokens < 1:
        raise ConfigError(f"max_tokens must be >= 1, got {max_tokens}")
    if seed < 0 or epoch < 0:
        raise ConfigError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    if any(n < 0 for n in src_lens) or any(n < 0 for n in tgt_lens):
        raise ValueError("token_batches: negative length")


def token_batches(
    src_lens: Sequence[int],
    tgt_lens: Sequence[int],
    max_tokens: int,
    shuffle: bool,
    seed: int,
    epoch: int,
    rank: int = 0,
    world_size: int = 1,
) -> list[list[int]]:
    """Group N examples into batches of indices bounded by a padded-token budget.

    Lengths are the padded lengths each example will occupy (count the BOS/EOS that
    :func:`collate` adds). Examples are sorted by (max(src, tgt), src, tgt) - ties broken
    randomly when ``shuffle`` - and packed greedily so that
    ``len(batch) * max(max(src_len), max(tgt_len)) <= max_tokens``; an example longer than
    ``max_tokens`` gets a batch of its own. With ``shuffle`` the batch order is permuted.
    All randomness comes from ``numpy.random.default_rng((seed, epoch))``, so the result is a
    function of the arguments only.

    For DDP (``world_size > 1``) the last ``len(batches) % world_size`` batches (after the
    shuffle, so different ones each epoch) are dropped and rank r gets batches
    ``r::world_size``: every rank gets the same number of batches and ranks are disjoint.
    Use ``world_size=1`` for evaluation, where every example must be seen exactly once.

    Returns:
        list of batches, each a list of example indices in 0..N-1.
    """
    _check_batch_args(src_lens, tgt_lens, max_tokens, seed, epoch, rank, world_size)
    rng = np.random.default_rng((seed, epoch)) if shuffle else None
    order = _length_order(src_lens, tgt_lens, rng)
    sizes = [max(s, t) for s, t in zip(src_lens, tgt_lens)]
    batches = _pack(order, sizes, max_tokens)
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    if world_size > 1:
        usable = len(batches) - len(batches) % world_size
        if batches and usable == 0:
            raise DataError(
                f"only {len(batches)} batches for {world_size} ranks; lower max_tokens"
            )
        batches = batches[:usable][rank::world_size]
    return batches
