"""Typed configuration: dataclasses built from YAML/dicts, with dotted command-line overrides.

Every config class is a ``@dataclass`` whose ``__post_init__`` validates its values and raises
:class:`posenc.errors.ConfigError` with a one-line message. ``from_dict`` checks that every key
exists and that every value has the annotated type, so a typo in a YAML file is an error, not a
silently ignored key.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
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
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (inner, *_) = typing.get_args(tp) or (Any,)
        return [_check_scalar(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return from_dict(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def from_dict(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from a (nested) dict, rejecting unknown keys and wrong types.

    A class may define ``_preset_defaults(data) -> dict`` to supply defaults chosen by a key in
    ``data`` (e.g. a model preset); explicit keys win over the preset.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping, got {data!r}")
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


def to_dict(cfg: Any) -> Any:
    """Plain nested dict/list form of a config (YAML- and JSON-serialisable)."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg) if f.init}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    return cfg


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into (["a","b","c"], parsed YAML value)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE (e.g. model.d_model=256)")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: empty key part")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


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


def merge_overrides(data: dict[str, Any], overrides: list[str], cls: type | None = None) -> dict[str, Any]:
    """Apply dotted overrides to a raw config dict (before typing), returning a new dict.

    When ``cls`` is given, a key that is not a field may be resolved by the class's
    ``_resolve_alias(path) -> path`` hook (e.g. ``model.position.max_shift`` →
    ``model.position.shape.max_shift``).
    """
    out = copy.deepcopy(data) if data else {}
    for text in overrides:
        path, value = parse_override(text)
        if cls is not None:
            path = resolve_path(cls, path, out)
        _set_path(out, path, value)
    return out


def resolve_path(cls: type, path: list[str], data: dict[str, Any], prefix: str = "") -> list[str]:
    """Resolve an override path against dataclass ``cls``, following alias hooks."""
    hints = typing.get_type_hints(cls)
    head, rest = path[0], path[1:]
    if head not in hints:
        alias = getattr(cls, "_resolve_alias", None)
        if alias is not None:
            resolved = alias(path, data)
            if resolved is not None:
                return resolved
        raise ConfigError(f"override {prefix}{'.'.join(path)}: unknown option {head!r} for {cls.__name__}")
    if not rest:
        return path
    sub = hints[head]
    if dataclasses.is_dataclass(sub):
        child = data.get(head) if isinstance(data.get(head), dict) else {}
        return [head, *resolve_path(sub, rest, child, f"{prefix}{head}.")]
    return path


def apply_mapping(data: dict[str, Any], mapping: dict[str, Any], cls: type | None = None) -> dict[str, Any]:
    """Like :func:`merge_overrides` with ``{"a.b": value}`` instead of ``["a.b=value"]`` strings."""
    out = copy.deepcopy(data) if data else {}
    for key, value in mapping.items():
        path = str(key).split(".")
        if cls is not None:
            path = resolve_path(cls, path, out)
        _set_path(out, path, value)
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, with a one-line error for a missing or malformed file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
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


def save_yaml(cfg: Any, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")


def require(cond: bool, message: str) -> None:
    """Raise ConfigError(message) unless ``cond``; used by ``__post_init__`` validators."""
    if not cond:
        raise ConfigError(message)
