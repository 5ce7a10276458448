"""Run fingerprints: what determines a run's data and model, so a run directory never lies.

A run directory stores ``fingerprint.json`` = :func:`fingerprint` of the resolved config it was
trained with. Resuming (``posenc train``) or reusing a run (``posenc experiment``) compares the
stored fingerprint with the new config's and stops with one line naming the differing keys
(:func:`diff_keys`), unless every difference only extends or observes training
(:data:`EXTENSION_KEYS`: step/epoch caps, patience, logging, checkpoint bookkeeping, device).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from posenc.config import to_dict

#: ``train.*`` options that may change between a run and its resumption: they extend training
#: or only change what is logged/kept, never what has been trained so far.
EXTENSION_KEYS = frozenset({
    "max_steps", "max_epochs", "patience", "log_every", "validate_every", "save_every", "keep_last",
    "average_last", "average_best", "bleu_every", "num_threads", "device", "min_delta",
})

#: Top-level sections of a run config that never enter the fingerprint (where, not what).
IGNORED_SECTIONS = frozenset({"out_dir", "data_dir", "decode"})


def fingerprint(cfg: Any) -> dict[str, Any]:
    """The parts of a resolved run config (a dataclass) that determine its data and its model:
    every section except paths and decoding, with ``train`` minus :data:`EXTENSION_KEYS`."""
    data = to_dict(cfg)
    out = {k: v for k, v in data.items() if k not in IGNORED_SECTIONS}
    if isinstance(out.get("train"), dict):
        out["train"] = {k: v for k, v in out["train"].items() if k not in EXTENSION_KEYS}
    return json.loads(json.dumps(out, sort_keys=True, default=str))


def digest(fp: dict[str, Any]) -> str:
    """Short stable hash of a fingerprint (for directory names and quick equality)."""
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, sub in value.items():
            flat.update(_flatten(sub, f"{prefix}{key}."))
        return flat or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


def diff_keys(saved: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two fingerprints (sorted)."""
    a, b = _flatten(saved), _flatten(new)
    return sorted(k for k in set(a) | set(b) if a.get(k, "<absent>") != b.get(k, "<absent>"))


def describe_diff(saved: dict[str, Any], new: dict[str, Any], limit: int = 4) -> str:
    """One-line description: ``model.d_model (256 -> 512), data.corpus ('bible' -> 'toy')``."""
    a, b = _flatten(saved), _flatten(new)
    keys = diff_keys(saved, new)
    parts = [f"{k} ({a.get(k, '<absent>')!r} -> {b.get(k, '<absent>')!r})" for k in keys[:limit]]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(parts) + more
