"""Name → class registries for the three position families.

A method registers itself with a params dataclass; ``build_*`` constructs it from that params
object. Nothing else in the package branches on method names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from posenc.errors import ConfigError


@dataclass(frozen=True)
class Entry:
    name: str
    params: type
    builder: Callable[..., Any]


INPUT: dict[str, Entry] = {}
ATTENTION: dict[str, Entry] = {}
AUGMENT: dict[str, Entry] = {}
_FAMILIES = {"input": INPUT, "attention": ATTENTION, "augment": AUGMENT}


def register(family: str, name: str, params: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``@register("input", "sinusoidal", SinusoidalParams)`` on a class/factory."""
    table = _FAMILIES[family]

    def deco(builder: Callable[..., Any]) -> Callable[..., Any]:
        if name in table:
            raise ValueError(f"position method {name!r} registered twice")
        table[name] = Entry(name, params, builder)
        return builder

    return deco


def family_of(name: str) -> str:
    for family, table in _FAMILIES.items():
        if name in table:
            return family
    known = sorted(n for t in _FAMILIES.values() for n in t)
    raise ConfigError(f"unknown position method {name!r} (known: {', '.join(known)})")


def entry(name: str) -> Entry:
    return _FAMILIES[family_of(name)][name]
