"""Name → class registries for the three position families.

A method registers itself with a params dataclass; ``build_*`` constructs it from that params
object. Nothing else in the package branches on method names.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from posenc.errors import ConfigError


@dataclass(frozen=True)
class Entry:
    """One registered method: how to build it and what the docs tables say of it.

    Args:
        name: the method's registered name (its YAML block and ``position.name`` part).
        params: its params dataclass.
        builder: the class (or factory) called with ``params=`` and the model's sizes.
        what: what the method does, one line (with ``paper``, the generated docs tables).
    """

    name: str
    params: type
    builder: Callable[..., Any]
    #: Augmentations that may rewrite the positions this method reads (``shape``, ``cape``, ...).
    augmentable_by: frozenset[str] = field(default_factory=frozenset)
    #: What the positions index: ``sequence`` (1-D, text and audio) or ``grid`` (2-D, images).
    layout: str = "sequence"
    #: Only defined for causal (decoder-only or decoder) self-attention (CoPE, xPos): refused in a
    #: bidirectional encoder.
    causal_only: bool = False
    #: The paper it implements and what it does, one line each (the generated docs tables).
    paper: str = ""
    what: str = ""


INPUT: dict[str, Entry] = {}
ATTENTION: dict[str, Entry] = {}
AUGMENT: dict[str, Entry] = {}
_FAMILIES = {"input": INPUT, "attention": ATTENTION, "augment": AUGMENT}
#: Modules of ``posenc.positions`` that are the interface, not methods (config/factory need the
#: registry filled first, so discovery must not import them).
_INFRASTRUCTURE = frozenset({"base", "registry", "config", "factory", "tables"})


def register(family: str, name: str, params: type, augmentable_by: tuple[str, ...] = (), *,
             layout: str = "sequence", causal_only: bool = False, paper: str = "",
             what: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``@register("input", "sinusoidal", SinusoidalParams, augmentable_by=("shape",))``
    on a class/factory. Docs and tests enumerate methods by these entries.

    Args:
        family: ``input``, ``attention`` or ``augment``.
        name: the method's name (unique across families).
        params: its params dataclass.
        augmentable_by: the augmentations that compose with this method (it reads the positions
            they rewrite); every other combination is rejected by ``resolve``.
        layout: ``sequence`` or ``grid`` (2-D image positions).
        causal_only: the method is defined for causal self-attention only.
        paper: one line for the method tables of the docs (positions/tables.py): the paper.
        what: one line for those tables: what the method does.

    Returns:
        The decorator; it registers the class/factory and returns it unchanged.

    Raises:
        ValueError: an unknown layout, or (from the decorator) a name registered twice.
    """
    table = _FAMILIES[family]
    if layout not in ("sequence", "grid"):
        raise ValueError(f"position method {name!r}: layout must be 'sequence' or 'grid', got {layout!r}")

    def deco(builder: Callable[..., Any]) -> Callable[..., Any]:
        if name in table:
            raise ValueError(f"position method {name!r} registered twice")
        table[name] = Entry(name, params, builder, frozenset(augmentable_by), layout, causal_only, paper, what)
        return builder

    return deco


def discover() -> None:
    """Import every module of ``posenc.positions`` so each method registers itself: a new method
    is one new file (its params become a ``PositionConfig`` block, its name resolvable)."""
    package = importlib.import_module("posenc.positions")
    for module in sorted(m.name for m in pkgutil.iter_modules(package.__path__)):
        if module not in _INFRASTRUCTURE:
            importlib.import_module(f"posenc.positions.{module}")


def entries() -> Iterator[Entry]:
    """Every registered method, family by family (input, attention, augment), in name order.

    Yields:
        The registry entries.
    """
    for table in _FAMILIES.values():
        yield from (table[n] for n in sorted(table))


def family_of(name: str) -> str:
    """The family a registered method belongs to.

    Args:
        name: a registered method name (not an alias).

    Returns:
        ``input``, ``attention`` or ``augment``.

    Raises:
        ConfigError: an unknown name (the message lists the known ones).
    """
    for family, table in _FAMILIES.items():
        if name in table:
            return family
    known = sorted(n for t in _FAMILIES.values() for n in t)
    raise ConfigError(f"unknown position method {name!r} (known: {', '.join(known)})")


def entry(name: str) -> Entry:
    """The registry entry of a method.

    Args:
        name: a registered method name (not an alias).

    Returns:
        Its entry.

    Raises:
        ConfigError: an unknown name.
    """
    return _FAMILIES[family_of(name)][name]
