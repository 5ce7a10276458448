"""A task package's exports loaded on first use (PEP 562), so that importing the package, or its
config and spec (what a grid's schema and :func:`~posenc.runs.spec.discover` read), imports
neither its task module nor its evaluation, reports or matplotlib."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, modules: dict[str, tuple[str, ...]]) -> tuple[Callable[[str], Any],
                                                                             Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package whose exports are loaded when
    first asked for.

    Args:
        package: the package's ``__name__``.
        modules: the package's module (relative name) → the exports it defines.

    Returns:
        ``__getattr__(name)``: the export ``name``, its module imported; an AttributeError for any
        other name (Python then imports a submodule of that name, if there is one). ``__dir__()``:
        the package's names with its exports (introspection and completion list them unloaded).
    """
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    def __dir__() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *where})

    return __getattr__, __dir__
