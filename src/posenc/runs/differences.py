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
    key is a leaf, an empty dict at the top (no ``prefix``) has no keys."""
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
    """``(dotted key, saved value, current value)`` for every key at which two nested config dicts
    differ, sorted by key, :data:`ABSENT` for a side that lacks the key. ``prefix`` names the
    section (``config_differences(a, b, "model")`` → ``model.heads``)."""
    a, b = flatten(saved, f"{prefix}." if prefix else ""), flatten(current, f"{prefix}." if prefix else "")
    diffs = ((k, a.get(k, ABSENT), b.get(k, ABSENT)) for k in sorted(set(a) | set(b)))
    return [(k, x, y) for k, x, y in diffs if not _same(x, y)]


def describe_differences(diffs: list[tuple[str, Any, Any]], limit: int = 4) -> str:
    """One line for :func:`config_differences`' result: ``model.d_model (256 -> 512), data.corpus
    ('bible' -> 'toy')``, the first ``limit`` of them and how many more."""
    parts = [f"{k} ({a!r} -> {b!r})" for k, a, b in diffs[:limit]]
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return ", ".join(parts) + more
