"""Position-method lists for the tests, taken from the registry: a new method file is covered by the
KV-cache, beam, CUDA-graph and textbook-attention tests without editing them.

Names are registry names (``sinusoidal``, ``shaw``, ``sinusoidal+shape``, ...): every 1-D
(``layout: sequence``) input method alone, every attention method alone (with input ``none``),
every valid method + augmentation pair, and the papers' input + attention models (APE + Shaw,
RR-Transformer). :data:`SMALL` shrinks a method's tables or fixes its evaluation positions
where a test needs that; a method without an entry is tested with its defaults.
"""

from __future__ import annotations

from typing import Any

from posenc.errors import ConfigError
from posenc.positions import registry, resolve
from posenc.positions.config import PositionConfig  # noqa: F401  (fills the registry)

#: Per-method options for tests: small Shaw tables (clipping exercised), positions inside SHAPE's
#: table, raw CAPE, randomized positions sequential at evaluation (sampled ones need a horizon) and
#: inside a learned table.
SMALL: dict[str, dict[str, Any]] = {
    "shaw": {"k": 3},
    "shape": {"max_shift": 20},
    "cape": {"mean_normalize": False},
    "randomized": {"eval": "sequential", "max_len": 256},
}

#: Input + attention combinations of the papers (Shaw et al. "both", Neishi's RR-Transformer).
PAPER_COMBOS = ("sinusoidal+shaw", "gru+shaw")


def _sequence(table: dict[str, registry.Entry]) -> list[registry.Entry]:
    return [table[n] for n in sorted(table) if table[n].layout == "sequence"]


def _valid(name: str) -> bool:
    try:
        resolve(name)
    except ConfigError:
        return False
    return True


def sequence_methods(causal: bool = True) -> list[str]:
    """Every 1-D method and valid method + augmentation pair; ``causal=False`` leaves out the
    methods defined for causal attention only (a seq2seq encoder is bidirectional) and the
    augmentations of task-given ids (Abacus)."""
    bases = [e for e in (*_sequence(registry.INPUT), *_sequence(registry.ATTENTION)) if causal or not e.causal_only]
    names = [e.name for e in bases]
    # Abacus shifts task-given digit ids: the LM of the length suite takes them, a seq2seq model refuses it
    augs = [a.name for a in _sequence(registry.AUGMENT) if causal or not getattr(a.builder, "needs_task_ids", False)]
    names += [f"{b}+{a}" for b in names for a in augs if _valid(f"{b}+{a}")]
    return names + [c for c in PAPER_COMBOS if _valid(c) and c not in names]


def params_for(name: str) -> dict[str, Any]:
    """The :data:`SMALL` options of the methods ``name`` uses (a ``model.position`` mapping less ``name``)."""
    m = resolve(name)
    return {k: dict(SMALL[k]) for k in (m.input, m.attention, m.augment) if k in SMALL}


def uses(name: str, method: str) -> bool:
    """Does position ``name`` use registered ``method``?"""
    m = resolve(name)
    return method in (m.input, m.attention, m.augment)
