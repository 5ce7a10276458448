"""Typed configuration: dataclasses built from YAML/dicts, with dotted command-line overrides.

Every config class is a ``@dataclass`` whose ``__post_init__`` validates its values and raises
:class:`posenc.errors.ConfigError` with a one-line message. ``from_dict`` checks that every key
exists and that every value has the annotated type, so a typo in a YAML file is an error, not a
silently ignored key.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import reprlib
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml

from posenc.errors import ConfigError

T = TypeVar("T")


def _check_scalar(value: Any, tp: Any, where: str) -> Any:
    """Coerce/check ``value`` against a scalar annotation (int, float, str, bool, Optional, list)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_scalar(value, arg, where)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {shorten(value)}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {shorten(value)}")
        (inner, *_) = typing.get_args(tp) or (Any,)
        return [_check_scalar(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {shorten(value)}")
        return from_dict(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {shorten(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {shorten(value)}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{where}: expected a finite number, got {value}")
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {shorten(value)}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {shorten(value)}")
    return value


def check_value(value: Any, tp: Any, where: str) -> Any:
    """``value`` checked (and int → float coerced) against annotation ``tp``, as every config
    field is: a one-line :class:`ConfigError` naming ``where`` otherwise."""
    return _check_scalar(value, tp, where)


def from_dict(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from a (nested) dict, rejecting unknown keys and wrong types.

    A class may define ``_preset_defaults(data) -> dict`` to supply defaults chosen by a key in
    ``data`` (e.g. a model preset); explicit keys win over the preset.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping, got {shorten(data)}")
    hook = getattr(cls, "_preset_defaults", None)
    if hook is not None:
        data = {**hook(data), **data}
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"{where + '.' if where else ''}{unknown[0]}: unknown option for {cls.__name__} "
            f"(known: {', '.join(sorted(names))})"
        )
    kwargs = {k: _check_scalar(v, hints[k], f"{where + '.' if where else ''}{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"{where or cls.__name__}: {err}") from None


def to_dict(cfg: Any, own: str | None = None) -> Any:
    """Plain nested dict/list form of a config (YAML- and JSON-serialisable). With ``own``, a
    section that defines a method of that name gives its own form (the run fingerprint's
    ``determining_dict``: only what determines a run)."""
    if own is not None and dataclasses.is_dataclass(cfg) and callable(getattr(cfg, own, None)):
        return getattr(cfg, own)()
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name), own) for f in dataclasses.fields(cfg) if f.init}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v, own) for v in cfg]
    if isinstance(cfg, dict):
        return {k: to_dict(v, own) for k, v in cfg.items()}
    return cfg


class CliText(str):
    """A value typed on the command line, kept as text until the schema says what it is."""


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into (["a","b","c"], :class:`CliText` value); the value is typed
    later by :func:`apply_overrides` against the schema (a string field keeps ``5`` as ``"5"``)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE (e.g. model.d_model=256)")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: empty key part")
    return key.split("."), CliText(raw)


def parse_text(raw: str, tp: Any = Any) -> Any:
    """Type command-line text ``raw`` for annotation ``tp``: a string annotation keeps the text
    (unless it is quoted YAML), anything else is parsed as YAML."""
    try:
        value = safe_load_bounded(raw) if raw != "" else ""
    except YamlTooLarge as err:
        raise ConfigError(f"override value {shorten(raw)}: refused: {err}") from None
    except yaml.YAMLError:
        return str(raw)
    if _wants_str(tp) and not isinstance(value, str):
        if value is None and _allows_none(tp) and raw.strip() in ("null", "~"):
            return None
        return str(raw)
    return value if not isinstance(value, str) else str(value)


def _union_args(tp: Any) -> tuple[Any, ...]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def _wants_str(tp: Any) -> bool:
    args = [a for a in _union_args(tp) if a is not type(None)]
    return bool(args) and all(a is str for a in args)


def _allows_none(tp: Any) -> bool:
    return type(None) in _union_args(tp)


def _set_path(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {'.'.join(path)}: {part} is not a section")
        node = child
    node[path[-1]] = value


def apply_overrides(
    data: dict[str, Any] | None, items: list[tuple[list[str], Any]], cls: type | None = None
) -> dict[str, Any]:
    """The one override applier: set every ``(path, value)`` on a copy of the raw config dict,
    then (when ``cls`` is given) resolve aliases against the final values, so the order of the
    overrides does not matter (``max_shift=500 name=shape`` = ``name=shape max_shift=500``), and
    type command-line text (:class:`CliText`) by the schema's annotation."""
    out = copy.deepcopy(data) if data else {}
    for path, value in items:
        _set_path(out, list(path), value)
    if cls is None:
        return _untext(out, Any)
    return _normalise(cls, out, "")


def merge_overrides(data: dict[str, Any], overrides: list[str], cls: type | None = None) -> dict[str, Any]:
    """Apply ``["a.b=value", ...]`` command-line overrides (see :func:`apply_overrides`). A whole
    section and a key inside it (``train.max_steps=5 'train={lr: 1}'``) are refused in one line:
    the section would silently replace the key (or the key fail on the text of the section)."""
    items = [parse_override(text) for text in overrides]
    _check_nested(items, overrides)
    return apply_overrides(data, items, cls)


def _check_nested(items: list[tuple[list[str], Any]], texts: list[str]) -> None:
    """One-line ConfigError when one override sets a whole section (a mapping) holding another's
    key (a scalar there is already an error of its own: the section expects a mapping)."""
    for (outer, value), outer_text in zip(items, texts):
        nested = [t for (inner, _), t in zip(items, texts) if len(outer) < len(inner) and inner[: len(outer)] == outer]
        if nested and isinstance(parse_text(value), dict):
            section = ".".join(outer)
            raise ConfigError(f"overrides {shorten(outer_text, 60)} and {shorten(nested[0], 60)}: the first replaces "
                              f"the whole {section} section; give its keys one by one ({section}.KEY=VALUE)")


def apply_mapping(data: dict[str, Any], mapping: dict[str, Any], cls: type | None = None) -> dict[str, Any]:
    """Apply ``{"a.b": value}`` overrides (already typed values; see :func:`apply_overrides`)."""
    return apply_overrides(data, [(str(k).split("."), v) for k, v in mapping.items()], cls)


def _untext(value: Any, tp: Any) -> Any:
    if isinstance(value, CliText):
        return parse_text(value, tp)
    if isinstance(value, dict):
        return {k: _untext(v, Any) for k, v in value.items()}
    return value


def _normalise(cls: type, data: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Move alias keys to their targets and type CLI text, recursively along ``cls``."""
    hints = typing.get_type_hints(cls)
    alias = getattr(cls, "_resolve_alias", None)
    out: dict[str, Any] = {}
    moved: list[tuple[list[str], Any]] = []
    for key, value in data.items():
        target = alias([key], data) if key not in hints and alias is not None else None
        if target is not None and len(target) > 1:
            moved.append((target, value))
        elif key not in hints:
            known = ", ".join(sorted(f.name for f in dataclasses.fields(cls) if f.init))
            raise ConfigError(f"{prefix}{key}: unknown option for {cls.__name__} (known: {known})")
        else:
            out[key] = value
    for target, value in moved:
        _set_path(out, target, value)
    option_types = getattr(cls, "_option_types", None)
    for key, value in out.items():
        tp = hints.get(key, Any)
        if dataclasses.is_dataclass(tp) and isinstance(value, dict):
            out[key] = _normalise(tp, value, f"{prefix}{key}.")
        elif typing.get_origin(tp) is dict and isinstance(value, dict) and option_types is not None:
            types_ = option_types(key, out)
            out[key] = {k: parse_text(v, types_.get(k, str)) if isinstance(v, CliText) else _untext(v, Any)
                        for k, v in value.items()}
        else:
            out[key] = _untext(value, tp)
    return out


#: Bounds on what a config may be: file size, nodes once aliases are expanded, nesting depth.
MAX_YAML_BYTES = 1 << 20
MAX_YAML_NODES = 100_000
MAX_YAML_DEPTH = 64
#: Digits an integer value may have (config files, overrides, ``--seeds``): every posenc integer fits
#: in 64 bits (20 digits); a longer one is refused before Python converts it, which costs time
#: quadratic in its length and fails over 4,300 digits.
MAX_INT_DIGITS = 30
#: Seeds are what torch, numpy and Python's random all accept: integers in [-2**63, 2**63).
SEED_RANGE = (-(2**63), 2**63)


class YamlTooLarge(yaml.YAMLError):
    """A YAML document over :data:`MAX_YAML_NODES` (aliases expanded) or :data:`MAX_YAML_DEPTH`."""


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses, while composing and before building any Python object,
    a document whose expanded size (every alias counted as a copy of its anchor) exceeds
    :data:`MAX_YAML_NODES` or whose expanded nesting exceeds :data:`MAX_YAML_DEPTH`, and
    recursive aliases (``&a [*a]``). The bounds are computed per node from its children's, so
    an alias bomb is refused after reading its few hundred bytes."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._bounds: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)
        self._open = 0  # nodes being composed (the parser's nesting, before any alias)

    def compose_node(self, parent: Any, index: Any) -> Any:
        alias = self.check_event(yaml.AliasEvent)
        if self._open >= MAX_YAML_DEPTH:
            raise YamlTooLarge(f"nested deeper than {MAX_YAML_DEPTH} levels{_at(self.peek_event())}")
        self._open += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._open -= 1
        if not alias:
            self._bounds[id(node)] = self._measure(node)
        elif id(node) not in self._bounds:  # an alias to a node still being composed
            raise YamlTooLarge(f"recursive alias{_at(node)}")
        return node

    def _measure(self, node: Any) -> tuple[int, int]:
        """(nodes, depth) of ``node`` with aliases expanded, from its children's (already known)."""
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            return 1, 1
        size, depth = 1, 1
        for child in children:
            child_size, child_depth = self._bounds[id(child)]
            size, depth = size + child_size, max(depth, child_depth + 1)
        if size > MAX_YAML_NODES:
            raise YamlTooLarge(f"more than {MAX_YAML_NODES} values once aliases are expanded{_at(node)}")
        if depth > MAX_YAML_DEPTH:
            raise YamlTooLarge(f"nested deeper than {MAX_YAML_DEPTH} levels{_at(node)}")
        return size, depth


def _bounded_int(loader: BoundedLoader, node: Any) -> int:
    """YAML's int constructor, the digits counted first (:data:`MAX_INT_DIGITS`)."""
    digits = sum(c.isalnum() for c in str(node.value).lower().removeprefix("-").removeprefix("+"))
    if digits > MAX_INT_DIGITS:
        raise YamlTooLarge(f"an integer of {digits} digits{_at(node)}; the limit is {MAX_INT_DIGITS}")
    return int(yaml.SafeLoader.construct_yaml_int(loader, node))


BoundedLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def check_int_text(text: str, what: str) -> int:
    """``text`` as an integer (optional sign, decimal digits), its length bounded before conversion
    (:data:`MAX_INT_DIGITS`): a one-line ConfigError naming ``what`` otherwise."""
    body = text.strip().removeprefix("-")
    if not body.isdigit() or not body.isascii():
        raise ConfigError(f"{what} must be an integer, got {shorten(text)}")
    if len(body) > MAX_INT_DIGITS:
        raise ConfigError(f"{what}: an integer of {len(body)} digits; the limit is {MAX_INT_DIGITS}")
    return int(text)


def require_seeds(seeds: list[int], what: str) -> None:
    """Every seed in :data:`SEED_RANGE` (one line naming ``what`` and the first outside)."""
    low, high = SEED_RANGE
    bad = [s for s in seeds if not low <= s < high]
    require(not bad, f"{what} must be in [-2**63, 2**63), got {shorten(bad[0]) if bad else ''}")


def _at(node: Any) -> str:
    mark = getattr(node, "start_mark", None)
    return f" (line {mark.line + 1})" if mark is not None else ""


def safe_load_bounded(text: str) -> Any:
    """``yaml.safe_load`` with the bounds of :class:`BoundedLoader` (raises a ``yaml.YAMLError``)."""
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _read_config_text(p: Path) -> str:
    """The text of config file ``p``: a one-line error if missing, over 1 MiB, or not UTF-8."""
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found")
    size = p.stat().st_size
    if size > MAX_YAML_BYTES:
        raise ConfigError(f"{p}: config file is {size} bytes; the limit is {MAX_YAML_BYTES} (1 MiB)")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not valid YAML (not UTF-8 text)") from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, with a one-line error for a missing, oversized or malformed file
    (bounded: see :class:`BoundedLoader`)."""
    p = Path(path)
    text = _read_config_text(p)
    try:
        data = safe_load_bounded(text)
    except YamlTooLarge as err:
        raise ConfigError(f"{p}: refused: {err}") from None
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        at = f" line {line + 1}" if line is not None else ""
        raise ConfigError(f"{p}:{at} not valid YAML") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be a mapping")
    return data


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Load ``cls`` from an optional YAML file plus dotted overrides."""
    data = load_yaml(path) if path is not None else {}
    data = merge_overrides(data, overrides or [], cls)
    return from_dict(cls, data)


def shorten(value: Any, limit: int = 150) -> str:
    """``repr(value)`` for a message, at most about ``limit`` characters: built with
    :mod:`reprlib` (never the whole repr of a huge value); a long string shows its start and length."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    r = reprlib.Repr()
    r.maxstring = r.maxother = r.maxlong = limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = 20
    r.maxlevel = 4
    text = r.repr(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Prefix a :class:`ConfigError` raised inside with ``path`` (the file its values came from),
    unless the message already names it: ``run/config.yaml: bogus: unknown option for RunConfig``."""
    try:
        yield
    except ConfigError as err:
        if str(path) in str(err):
            raise
        raise ConfigError(f"{path}: {err}") from None


def require_finite(cfg: Any, section: str) -> None:
    """Refuse a non-finite value (inf, nan) in any float or list-of-float field of dataclass
    ``cfg``; ``section`` names it in the message (``train.lr must be a finite number, got inf``)."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"{section}.{f.name} must be a finite number, got {v}")


def require(cond: bool, message: str) -> None:
    """Raise ConfigError(message) unless ``cond``; used by ``__post_init__`` validators."""
    if not cond:
        raise ConfigError(message)


def with_defaults(base: type[T], name: str, doc: str, module: str, **defaults: Any) -> type[T]:
    """A dataclass ``name`` that is ``base`` with other ``defaults`` (a task's recipe; YAML keys
    still override them), defined in ``module``. A default for a field ``base`` lacks is a TypeError."""
    hints = typing.get_type_hints(base)
    unknown = sorted(set(defaults) - {f.name for f in dataclasses.fields(base)})  # type: ignore[arg-type]
    if unknown:
        raise TypeError(f"{base.__name__} has no field {unknown[0]!r}")
    return dataclasses.make_dataclass(name, [(k, hints[k], v) for k, v in defaults.items()], bases=(base,),
                                      namespace={"__doc__": doc, "__module__": module})
