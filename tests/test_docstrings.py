"""The library surface documents itself: every public function, method and class of the packages in
``DOCUMENTED`` has a docstring in the house (Google/torchtune) style, ``Args:`` naming each parameter
and ``Returns:`` (or ``Yields:``) unless it returns ``None``, and no docstring there tells the code's
history.

Read from source with ``ast`` (nothing is imported, so optional extras need not be installed). Public
means a module-level name without a leading underscore, and a class's methods without one (those of
a private base class too: they are the methods of the public class it is built into, as
``PositionConfig`` is made from ``_PositionConfigBase``).
A class's ``__init__`` parameters go in the class docstring's ``Args:``; a dataclass field counts as
named there too when a ``#:`` comment above it says what it holds (the option tables of the docs are
generated from those comments). Properties need a docstring, nothing more.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: The packages held to this test (paths under src/, their subpackages included).
DOCUMENTED = ("posenc/positions", "posenc/models", "posenc/hf", "posenc/evaluation", "posenc/runs", "posenc/training",
              "posenc/analysis")

#: Phrases that tell a reader what the code used to do rather than what it does.
HISTORY = re.compile(r"\b(previously|used to|no longer|before this|new in|formerly|issue \d+)\b", re.I)

SECTION = re.compile(r"^(Args|Arguments|Returns|Yields|Raises|Example|Examples|Note|Notes|Attributes|Shape):\s*$")


@dataclass(frozen=True)
class Item:
    """One public callable: where it is, its docstring and what that docstring must name."""

    where: str
    doc: str | None
    params: tuple[str, ...]
    needs_returns: bool
    documented_elsewhere: frozenset[str] = frozenset()


def modules(package: str) -> list[Path]:
    """The public ``.py`` files of ``package`` (a path under src/), subpackages included."""
    return sorted(p for p in (SRC / package).rglob("*.py")
                  if not any(part.startswith("_") and part != "__init__.py" for part in p.relative_to(SRC).parts))


def sections(doc: str) -> dict[str, list[str]]:
    """The lines of each ``Name:`` section of a docstring, by name (``Args``, ``Returns``, ...)."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in inspect.cleandoc(doc).splitlines():
        header = SECTION.match(line)
        if header:
            current = found.setdefault(header.group(1), [])
        elif line and not line[0].isspace():
            current = None
        elif current is not None:
            current.append(line)
    return found


def named_args(doc: str) -> set[str]:
    """The parameter names an ``Args:`` section lists (``name:``, ``name (type):``, ``*args:``)."""
    args = sections(doc).get("Args", []) + sections(doc).get("Arguments", [])
    indent = min((len(a) - len(a.lstrip()) for a in args if a.strip()), default=0)
    return {m.group(1) for a in args if len(a) - len(a.lstrip()) == indent
            for m in [re.match(r"\s*\**(\w+)\s*(\([^)]*\))?\s*:", a)] if m}


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> tuple[str, ...]:
    """``fn``'s parameter names: ``self``/``cls`` of a method and ``_``-prefixed (unused) ones left out."""
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    if method and names and not _is_static(fn):
        names = names[1:]
    names += [p.arg for p in a.kwonlyargs]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return tuple(n for n in names if not n.startswith("_"))


def _decorators(node: ast.AST) -> set[str]:
    return {ast.unparse(d.func if isinstance(d, ast.Call) else d).split(".")[-1]
            for d in getattr(node, "decorator_list", [])}


def _is_static(fn: ast.AST) -> bool:
    return "staticmethod" in _decorators(fn)


def returns_something(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a ``Returns:`` section is due: the return annotation is not ``None`` (or missing)."""
    return fn.returns is None or ast.unparse(fn.returns) not in {"None", "NoReturn", "Never"}


def field_comments(cls: ast.ClassDef, source: list[str]) -> frozenset[str]:
    """Fields of ``cls`` with a ``#:`` comment on the line right above them."""
    return frozenset(s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                     and s.lineno >= 2 and source[s.lineno - 2].strip().startswith("#:"))


def init_fields(cls: ast.ClassDef) -> tuple[str, ...]:
    """The ``__init__`` parameters a dataclass or NamedTuple makes of its annotated fields."""
    bases = {ast.unparse(b).split(".")[-1] for b in cls.bases}
    if "dataclass" not in _decorators(cls) and "NamedTuple" not in bases:
        return ()
    return tuple(s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                 and "ClassVar" not in ast.unparse(s.annotation) and not _init_false(s.value))


def _init_false(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Call) and any(k.arg == "init" and ast.unparse(k.value) == "False"
                                               for k in value.keywords)


def class_items(cls: ast.ClassDef, where: str, source: list[str]) -> Iterator[Item]:
    """The class itself (its ``__init__`` parameters) and each public method and property."""
    init = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    params = parameters(init, method=True) if init else init_fields(cls)
    yield Item(where, ast.get_docstring(cls), params, False, field_comments(cls, source))
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or fn.name.startswith("_"):
            continue
        if _decorators(fn) & {"property", "cached_property", "setter"}:
            yield Item(f"{where}.{fn.name}", ast.get_docstring(fn), (), False)
        else:
            yield Item(f"{where}.{fn.name}", ast.get_docstring(fn), parameters(fn, method=True), returns_something(fn))


def public_items(package: str) -> Iterator[Item]:
    """Every public function, class and method of ``package``'s modules."""
    for path in modules(package):
        text = path.read_text(encoding="utf-8")
        module, source = path.relative_to(SRC).with_suffix("").as_posix().replace("/", "."), text.splitlines()
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef):
                items = class_items(node, f"{module}.{node.name}", source)
                yield from items if not node.name.startswith("_") else list(items)[1:]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
                yield Item(f"{module}.{node.name}", ast.get_docstring(node), parameters(node, method=False),
                           returns_something(node))


def problems(item: Item) -> list[str]:
    """What ``item``'s docstring lacks (empty when it is complete)."""
    if not item.doc or not item.doc.strip():
        return [f"{item.where}: no docstring"]
    missing = [p for p in item.params if p not in named_args(item.doc) | item.documented_elsewhere]
    found = sections(item.doc)
    out = [f"{item.where}: Args: does not name {', '.join(missing)}"] if missing else []
    if item.needs_returns and not ({"Returns", "Yields"} & found.keys()):
        out.append(f"{item.where}: no Returns: section")
    return out


@pytest.mark.parametrize("package", DOCUMENTED)
def test_public_callables_have_args_and_returns(package: str) -> None:
    items = list(public_items(package))
    assert items, f"no public callables found under src/{package}"
    missing = [p for item in items for p in problems(item)]
    assert not missing, f"{len(missing)} docstring gaps in {package}:\n" + "\n".join(missing)


@pytest.mark.parametrize("package", DOCUMENTED)
def test_docstrings_do_not_tell_history(package: str) -> None:
    """Neither a public callable's docstring nor a module's says what the code used to do."""
    docs = [(item.where, item.doc) for item in public_items(package)]
    docs += [(str(p.relative_to(SRC)), ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))))
             for p in modules(package)]
    told = [f"{where}: {m.group(0)!r}" for where, doc in docs if doc for m in HISTORY.finditer(doc)]
    assert not told, "docstrings say what the code does, not what it did:\n" + "\n".join(told)


def test_the_checker_finds_a_missing_section() -> None:
    """A docstring without its ``Args:``/``Returns:`` entries is reported; a complete one is not."""
    tree = ast.parse('def f(a, *, b) -> int:\n    """F.\n\n    Args:\n        a: one.\n    """\n'
                     'def g(a, b: int = 1) -> None:\n    """G.\n\n    Args:\n        a (int): one.\n'
                     '        b: two,\n            continued: not a name.\n    """\n')
    f, g = (Item(n.name, ast.get_docstring(n), parameters(n, False), returns_something(n)) for n in tree.body)
    assert problems(f) == ["f: Args: does not name b", "f: no Returns: section"]
    assert problems(g) == [] and named_args(g.doc or "") == {"a", "b"}
    assert problems(Item("h", None, (), False)) == ["h: no docstring"]
    assert HISTORY.search("as it previously did") and HISTORY.search("since issue 58")
    assert not HISTORY.search("starts the pass now, before the encoder")
