"""Dataset settings of the papers, as functions on lists of :class:`~posenc.data.corpora.Pair`.

* :func:`extrapolate` - SHAPE §4 EXTRAPOLATE (after Neishi & Yoshinaga 2019): drop long pairs;
  :func:`in_range` - which (validation) pairs lie inside that training length range.
* :func:`interpolate` - SHAPE §4 INTERPOLATE: join ten neighbouring sentences with ``<sep>``.
* :func:`length_controlled` / :func:`split_by_bounds` - Neishi & Yoshinaga 2019 Table 5:
  Short/Middle/Long training sets with (nearly) equal numbers of source tokens.
* :func:`stack` - CAPE §5.3: stack consecutive sentences until the target has 300+ tokens.

``length_fn`` maps a text to its length in tokens (e.g. ``lambda s: len(tok.encode(s))``
for subwords); it is keyword-only so that it is never confused with a size argument.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import replace

from posenc.data.corpora import Pair
from posenc.errors import ConfigError, DataError

__all__ = ["extrapolate", "in_range", "interpolate", "length_controlled", "split_by_bounds", "split_names", "stack"]

LengthFn = Callable[[str], int]


def extrapolate(pairs: Sequence[Pair], max_len: int = 50, *, length_fn: LengthFn) -> list[Pair]:
    """Keep the pairs whose source and target both have <= ``max_len`` tokens (order kept).

    SHAPE EXTRAPOLATE applies this to the training data only; valid/test stay unfiltered (the
    early-stopping signal uses :func:`in_range` of valid: unseen lengths are the test).
    """
    keep = in_range([length_fn(p.src) for p in pairs], [length_fn(p.tgt) for p in pairs], max_len)
    return [pairs[i] for i in keep]


def in_range(src_lengths: Sequence[int], tgt_lengths: Sequence[int], max_len: int,
             src_bounds: tuple[int, int] | None = None) -> list[int]:
    """Indices of the pairs whose source and target both have <= ``max_len`` tokens (EXTRAPOLATE's
    training length range) and, with ``src_bounds = (lo, hi)``, whose source length is in
    [lo, hi] (a Short/Middle/Long training split's range, :func:`length_controlled`).

    Used for training (:func:`extrapolate`) and for the validation pairs that drive early stopping
    and best-checkpoint selection, so that lengths never seen in training are only ever a test,
    never the stopping signal."""
    if max_len < 1:
        raise ConfigError(f"max_len must be >= 1, got {max_len}")
    lo, hi = src_bounds if src_bounds is not None else (0, max_len)
    return [i for i, (s, t) in enumerate(zip(src_lengths, tgt_lengths, strict=True))
            if lo <= s <= min(hi, max_len) and t <= max_len]


def interpolate(pairs: Sequence[Pair], group: int = 10, sep: str = " <sep> ") -> list[Pair]:
    """Join each run of ``group`` consecutive pairs of the same document with ``sep``.

    Pairs are grouped by ``doc`` (documents in order of first appearance) and ordered by
    ``idx`` inside a document, then cut into consecutive runs of ``group``. As in SHAPE (App. A,
    Table 3: 4.5M sentence pairs become 450K), no sentence is dropped: the shorter run left at
    the end of a document (fewer than ``group`` sentences) is kept as one more output pair.
    Output pairs keep the doc; idx is the idx of the run's first pair.
    """
    if group < 1:
        raise ConfigError(f"group must be >= 1, got {group}")
    docs: dict[str, list[Pair]] = {}
    for p in pairs:
        docs.setdefault(p.doc, []).append(p)
    out: list[Pair] = []
    for doc, members in docs.items():
        members = sorted(members, key=lambda p: p.idx)
        for start in range(0, len(members), group):
            run = members[start : start + group]
            out.append(Pair(sep.join(p.src for p in run), sep.join(p.tgt for p in run),
                            doc, run[0].idx))
    return out


def split_names(n_splits: int) -> list[str]:
    """Split names: ``short, middle, long`` for 3, else ``split0 .. split{n-1}``."""
    return ["short", "middle", "long"] if n_splits == 3 else [f"split{k}" for k in range(n_splits)]


def _cut_points(lengths: list[int], n_splits: int) -> list[int]:
    """Cut positions 0 = c0 < c1 < ... < cn = N in the sorted lengths, equal token shares."""
    total = sum(lengths)
    cum = [0]
    for n in lengths:
        cum.append(cum[-1] + n)
    cuts = [0]
    for k in range(1, n_splits):
        target = total * k / n_splits
        lo, hi = cuts[-1] + 1, len(lengths) - (n_splits - k)
        c = bisect.bisect_left(cum, target)
        candidates = {min(max(x, lo), hi) for x in (c - 1, c)}
        cuts.append(min(candidates, key=lambda x: (abs(cum[x] - target), x)))
    cuts.append(len(lengths))
    return cuts


def length_controlled(
    pairs: Sequence[Pair], n_splits: int = 3, *, length_fn: LengthFn
) -> tuple[dict[str, list[Pair]], list[tuple[int, int]]]:
    """Split pairs by source length into ``n_splits`` parts with nearly equal source tokens.

    As in Neishi & Yoshinaga (2019, Table 5), pairs are sorted by source length (ties in
    corpus order) and cut where the cumulative number of source tokens is closest to
    k/n of the total; pairs of a boundary length may therefore fall on both sides of a cut
    (their Table 5 shows Short 1-24, Middle 24-34). Each part keeps corpus order.

    Returns:
        ({name: pairs}, bounds) with names from :func:`split_names` (short/middle/long for 3)
        and bounds[k] = (min source length, max source length) of part k.
    """
    if n_splits < 1:
        raise ConfigError(f"n_splits must be >= 1, got {n_splits}")
    if len(pairs) < n_splits:
        raise DataError(f"cannot split {len(pairs)} pairs into {n_splits} length ranges")
    lengths = [length_fn(p.src) for p in pairs]
    order = sorted(range(len(pairs)), key=lambda i: (lengths[i], i))
    cuts = _cut_points([lengths[i] for i in order], n_splits)
    splits: dict[str, list[Pair]] = {}
    bounds: list[tuple[int, int]] = []
    for name, a, b in zip(split_names(n_splits), cuts, cuts[1:]):
        part = sorted(order[a:b])
        splits[name] = [pairs[i] for i in part]
        bounds.append((lengths[order[a]], lengths[order[b - 1]]))
    return splits, bounds


def split_by_bounds(
    pairs: Sequence[Pair], bounds: Sequence[tuple[int, int]], *, length_fn: LengthFn
) -> dict[str, list[Pair]]:
    """Split (test) pairs into the length ranges returned by :func:`length_controlled`.

    A pair goes to the first part whose max source length is >= its length; longer pairs
    go to the last part. So a boundary length shared by two parts goes to the lower one.
    """
    if not bounds:
        raise ConfigError("bounds must not be empty")
    names = split_names(len(bounds))
    out: dict[str, list[Pair]] = {name: [] for name in names}
    for p in pairs:
        n = length_fn(p.src)
        k = next((k for k, (_, hi) in enumerate(bounds) if n <= hi), len(bounds) - 1)
        out[names[k]].append(p)
    return out


def _lower_first_letter(text: str) -> str:
    """Lower-case the first letter if only non-alphanumerics (quotes...) precede it."""
    for i, ch in enumerate(text):
        if ch.isalpha():
            return text[:i] + ch.lower() + text[i + 1 :]
        if ch.isalnum():
            return text
    return text


def _join_stacked(texts: list[str]) -> str:
    """CAPE junctions: a final '.' becomes ',' and the next sentence starts lower-cased."""
    out = texts[0].rstrip()
    for text in texts[1:]:
        if out.endswith("."):
            out = out[:-1] + ","
        out = f"{out} {_lower_first_letter(text.strip())}"
    return out


def stack(pairs: Sequence[Pair], min_target_tokens: int = 300, *, length_fn: LengthFn) -> list[Pair]:
    """Stack consecutive pairs until the target has >= ``min_target_tokens`` tokens (CAPE §5.3).

    The target length of a stack is the sum of ``length_fn`` over its target sentences.
    Source and target are joined the same way (see ``_join_stacked``); pairs are taken in the
    given order regardless of documents. The output keeps doc/idx of the first pair. An
    incomplete stack left at the end is dropped.
    """
    if min_target_tokens < 1:
        raise ConfigError(f"min_target_tokens must be >= 1, got {min_target_tokens}")
    out: list[Pair] = []
    run: list[Pair] = []
    tokens = 0
    for p in pairs:
        run.append(p)
        tokens += length_fn(p.tgt)
        if tokens >= min_target_tokens:
            src = _join_stacked([q.src for q in run])
            tgt = _join_stacked([q.tgt for q in run])
            out.append(replace(run[0], src=src, tgt=tgt))
            run, tokens = [], 0
    return out
