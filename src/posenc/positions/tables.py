"""The method tables of README.md and docs/positions.md, generated from the registry.

``python -m posenc.positions.tables`` rewrites every generated block of those files (between
``<!-- NAME -->`` and ``<!-- /NAME -->``); ``--check`` only says whether they are current (exit 1
otherwise, as the test does). A new method file therefore brings its rows with it: its
``@register(..., paper=..., what=...)`` line, its params dataclass (each option's default, and its
meaning from the ``#:`` comment above the field) and the augmentations it composes with.

Blocks: ``methods`` (every registered method: family, names, what, paper), ``combos`` (1-D method
× augmentation: valid or rejected by :func:`~posenc.positions.config.resolve`) and
``options:METHOD`` (option, default, meaning).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

from posenc.errors import ConfigError
from posenc.positions import registry
from posenc.positions.config import METHOD_ALIASES, MODEL_ALIASES, resolve

ROOT = Path(__file__).resolve().parents[3]
DOCS = (ROOT / "README.md", ROOT / "docs" / "positions.md")
BLOCK = re.compile(r"<!-- (?P<name>[\w:-]+) -->\n(?P<body>.*?)<!-- /(?P=name) -->", re.S)


def _aliases(name: str) -> list[str]:
    """Other names for ``name`` alone (``ape`` for ``sinusoidal``, ``rpe`` for ``shaw``) or, for an
    augmentation, for it on its usual input method (``cape-2d`` for ``sinusoidal2d+cape2d``)."""
    alone = [a for a, m in METHOD_ALIASES.items() if m == name]
    on_input = [a for a, full in MODEL_ALIASES.items() if name in registry.AUGMENT and full.endswith(f"+{name}")]
    return alone + [a for a in on_input if a != name and a not in alone]


def methods_table() -> list[str]:
    """Every registered method, family by family: names, what it does, the paper.

    Returns:
        The Markdown table's lines.
    """
    rows = ["| family | name (aliases) | what | paper |", "|---|---|---|---|"]
    for e in registry.entries():
        aliases = ", ".join(f"`{a}`" for a in _aliases(e.name))
        names = f"`{e.name}`" + (f" ({aliases})" if aliases else "")
        notes = [*(["causal stacks only"] if e.causal_only else []), *(["2-D, images"] if e.layout == "grid" else [])]
        what = e.what + (f" ({'; '.join(notes)})" if notes else "")
        rows.append(f"| {registry.family_of(e.name)} | {names} | {what} | {e.paper} |")
    return rows


def combos_table() -> list[str]:
    """Which 1-D augmentation composes with which 1-D input or attention method.

    Returns:
        The Markdown table's lines (``valid`` or ``rejected`` per cell).
    """
    augs = [e.name for e in registry.entries() if e.name in registry.AUGMENT and e.layout == "sequence"]
    rows = ["| method | " + " | ".join(augs) + " |", "|---" * (len(augs) + 1) + "|"]
    for e in registry.entries():
        if e.name in registry.AUGMENT or e.layout != "sequence":
            continue
        cells = ["valid" if _resolves(f"{e.name}+{a}") else "rejected" for a in augs]
        rows.append(f"| {e.name} | " + " | ".join(cells) + " |")
    return rows


def _resolves(name: str) -> bool:
    try:
        resolve(name)
    except ConfigError:
        return False
    return True


def option_docs(params: type) -> dict[str, str]:
    """Each field's meaning: the ``#:`` comment lines right above it in the class source.

    Args:
        params: a params dataclass.

    Returns:
        Field name → its meaning, for the fields that have one.
    """
    docs: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(params).splitlines():
        text = line.strip()
        if text.startswith("#:"):
            pending.append(text[2:].strip())
            continue
        field = re.match(r"(\w+)\s*:", text)
        if field and pending:
            docs[field.group(1)] = " ".join(pending)
        pending = []
    return docs


def _value(value: Any) -> str:
    """A default as YAML writes it (``true``, ``none``, ``[7, 7]``, ``10000.0``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def options_table(method: str) -> list[str]:
    """The options table of one method.

    Args:
        method: a registered method name.

    Returns:
        The lines of ``| option | default | meaning |`` of its params dataclass.
    """
    params = registry.entry(method).params
    docs, default = option_docs(params), params()
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(params):
        rows.append(f"| `{method}.{f.name}` | `{_value(getattr(default, f.name))}` | {docs.get(f.name, '')} |")
    return rows


def block(name: str) -> list[str]:
    """The generated lines of one block.

    Args:
        name: ``methods``, ``combos`` or ``options:METHOD``.

    Returns:
        The block's lines.

    Raises:
        ConfigError: one line, for an unknown block.
    """
    makers: dict[str, Callable[[], list[str]]] = {"methods": methods_table, "combos": combos_table}
    if name in makers:
        return makers[name]()
    if name.startswith("options:") and name[len("options:"):] in {e.name for e in registry.entries()}:
        return options_table(name[len("options:"):])
    raise ConfigError(f"unknown generated block <!-- {name} -->")


def render(text: str) -> str:
    """Regenerate the blocks of a document.

    Args:
        text: a document with ``<!-- NAME -->`` … ``<!-- /NAME -->`` blocks.

    Returns:
        ``text`` with every generated block replaced by its current lines.
    """
    return BLOCK.sub(
        lambda m: f"<!-- {m['name']} -->\n" + "\n".join(block(m["name"])) + f"\n<!-- /{m['name']} -->", text)


def undocumented() -> list[str]:
    """Options of registered methods without a ``#:`` meaning (the test requires none).

    Returns:
        ``METHOD.OPTION`` of each.
    """
    return [f"{e.name}.{f.name}" for e in registry.entries() for f in dataclasses.fields(e.params)
            if f.name not in option_docs(e.params)]


def main(argv: list[str]) -> int:
    """Rewrite the generated blocks of README.md and docs/positions.md (``--check``: compare only).

    Args:
        argv: the command-line arguments (``--check``, ``--help``; anything else is refused).

    Returns:
        The exit status: 0 done (or current), 1 stale under ``--check``, 2 a usage error or no checkout.
    """
    parser = argparse.ArgumentParser(prog="python -m posenc.positions.tables",
                                     description="Rewrite the method tables of README.md and docs/positions.md "
                                                 "from the registry (run from a posenc source checkout).")
    parser.add_argument("--check", action="store_true", help="only say whether they are current (exit 1 if not)")
    args = parser.parse_args(argv)
    missing = [p for p in DOCS if not p.is_file()]
    if missing:  # an installed package has no docs beside it: nothing of anyone else's is touched
        print(f"error: {missing[0]} not found: run this from a posenc source checkout", file=sys.stderr)
        return 2
    stale = [p for p in DOCS if render(p.read_text(encoding="utf-8")) != p.read_text(encoding="utf-8")]
    if args.check:
        for p in stale:
            print(f"{p}: generated method tables are out of date; run python -m posenc.positions.tables",
                  file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.write_text(render(p.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"rewrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
