"""Frozen dataclasses to JSON and back, strictly: what the session record (``workbench.record``) is written
with and read back from a file that may be broken or hostile.

:func:`to_json` writes a dataclass as an object of its fields (tuples as lists); a field declared with
``compare=False`` is runtime state (an inspection report, a session's clear counter) and is not written.
:func:`from_json` reads it back against the field types: a missing field without a default, a field the
class does not have, or a value of the wrong type raises :class:`DecodeError`, whose message names where
in the document it is (``transcript.answers[2].stats.ttft_s: expected a number, got "x"``).

Types understood: the dataclasses themselves, ``str``, ``int``, ``float``, ``bool``, ``Literal``, ``X | None``,
``tuple[X, ...]``, fixed ``tuple[A, B]``, and ``dict[str, Any]`` (JSON objects kept as they are).
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Mapping
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints


class DecodeError(ValueError):
    """A JSON document that does not have the shape of the type it is read as; the message says where."""


def recorded_fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    """The fields a record holds (``compare=False`` fields are runtime state, never written)."""
    return tuple(f for f in dataclasses.fields(cls) if f.compare)


def to_json(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses as objects of their recorded fields, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in recorded_fields(type(value))}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot record a {type(value).__name__}")


@cache
def _hints(cls: type, names: tuple[tuple[str, type], ...]) -> dict[str, Any]:
    module = sys.modules[cls.__module__]
    return get_type_hints(cls, globalns=vars(module), localns=dict(names))


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def from_json(tp: Any, data: Any, where: str = "", names: Mapping[str, type] | None = None) -> Any:
    """``data`` read as ``tp``; ``names``: the types an annotation names that its module imports only for
    type checking (e.g. ``{"MediaItem": MediaItem}``)."""
    extra = tuple(sorted((names or {}).items()))
    return _decode(tp, data, where or "document", extra)


def _decode(tp: Any, data: Any, where: str, names: tuple[tuple[str, type], ...]) -> Any:
    if tp is Any:
        return data
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, data, where, names)
    origin = get_origin(tp)
    args = get_args(tp)
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        if len(arms) != 1:
            raise TypeError(f"{tp} has more than one arm besides None")
        return _decode(arms[0], data, where, names)
    if origin is Literal:
        if data not in args or isinstance(data, bool) != any(isinstance(a, bool) for a in args):
            raise DecodeError(f"{where}: expected one of {', '.join(repr(a) for a in args)}, got {_describe(data)}")
        return data
    if origin is tuple:
        if not isinstance(data, list):
            raise DecodeError(f"{where}: expected a list, got {_describe(data)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, f"{where}[{i}]", names) for i, v in enumerate(data))
        if len(data) != len(args):
            raise DecodeError(f"{where}: expected {len(args)} items, got {len(data)}")
        return tuple(_decode(a, v, f"{where}[{i}]", names) for i, (a, v) in enumerate(zip(args, data, strict=True)))
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
            raise DecodeError(f"{where}: expected an object, got {_describe(data)}")
        return data
    if tp is bool:
        if not isinstance(data, bool):
            raise DecodeError(f"{where}: expected true or false, got {_describe(data)}")
        return data
    if tp is int:
        if not isinstance(data, int) or isinstance(data, bool):
            raise DecodeError(f"{where}: expected a whole number, got {_describe(data)}")
        return data
    if tp is float:
        if not isinstance(data, (int, float)) or isinstance(data, bool):
            raise DecodeError(f"{where}: expected a number, got {_describe(data)}")
        return float(data)
    if tp is str:
        if not isinstance(data, str):
            raise DecodeError(f"{where}: expected a string, got {_describe(data)}")
        return data
    raise TypeError(f"{where}: cannot read a {tp!r}")


def _decode_dataclass(cls: type, data: Any, where: str, names: tuple[tuple[str, type], ...]) -> Any:
    if not isinstance(data, dict):
        raise DecodeError(f"{where}: expected an object, got {_describe(data)}")
    fields = {f.name: f for f in recorded_fields(cls)}
    unknown = sorted(str(k) for k in data if k not in fields)
    if unknown:
        raise DecodeError(f"{where}: unknown field {unknown[0]!r}")
    hints = _hints(cls, names)
    values: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise DecodeError(f"{where}: missing field {name!r}")
            continue
        values[name] = _decode(hints[name], data[name], f"{where}.{name}", names)
    return cls(**values)
