"""Differences between two stored configs (nested dicts): the one comparison behind every
verdict on a run (:mod:`posenc.runs.same_run`) and a prepared data directory."""

from __future__ import annotations

import math
from typing import Any


class _Absent:
    """The value of a key that one side of :func:`config_differences` lacks (shown ``<absent>``)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts → ``{"a.b.c": leaf}`` with every key after ``prefix``; an empty dict under a
    key is a leaf, an empty dict at the top (no ``prefix``) has no keys.

    Args:
        value: a nested dict (a config as :func:`posenc.config.to_dict` gives it), or a leaf.
        prefix: put before every key, ending in ``.`` (``"model."``); ``""`` for none.

    Returns:
        Each leaf by its dotted key; a leaf ``value`` under ``prefix`` without its trailing dot.
    """
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, sub in value.items():
            flat.update(flatten(sub, f"{prefix}{key}."))
        return flat or ({prefix.rstrip("."): {}} if prefix else {})
    return {prefix.rstrip("."): value}


def _same(a: Any, b: Any) -> bool:
    """Config values equal: a tuple equals the list of its items, and NaN equals NaN."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        a, b = list(a), list(b)
    nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return nan or a == b


def config_differences(saved: Any, current: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Where two nested config dicts differ. A tuple equals the list of its items and NaN equals NaN,
    so a config read back from JSON equals the one that was written.

    Args:
        saved: the stored side (a nested dict, as read from a run's or a data directory's JSON).
        current: the side it is compared with (today's config as a nested dict).
        prefix: the section both sides are, put before every key
            (``config_differences(a, b, "model")`` → ``model.heads``); ``""`` for none.

    Returns:
        ``(dotted key, saved value, current value)`` for every key at which they differ, sorted by
        key, :data:`ABSENT` for the side that lacks the key; empty when they are the same.
    """
    a, b = flatten(saved, f"{prefix}." if prefix else ""), flatten(current, f"{prefix}." if prefix else "")
    diffs = ((k, a.get(k, ABSENT), b.get(k, ABSENT)) for k in sorted(set(a) | set(b)))
    return [(k, x, y) for k, x, y in diffs if not _same(x, y)]


def describe_differences(diffs: list[tuple[str, Any, Any]], limit: int = 4) -> str:
    """One line for a message that names what differs.

    Args:
        diffs: :func:`config_differences`' result.
        limit: how many differences to spell out; the rest are counted.

    Returns:
        ``model.d_model (256 -> 512), data.corpus ('bible' -> 'toy')``: the first ``limit`` of
        ``diffs``, then `` and N more`` when there are more; ``""`` for none.
    """
    parts = [f"{k} ({a!r} -> {b!r})" for k, a, b in diffs[:limit]]
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return ", ".join(parts) + more
