"""Read a parsed JSON document into frozen dataclasses, by their type hints, naming any bad field.

One walk for every section of a typed document (the artifact manifest): objects become the
annotated dataclass, lists become tuples, ``X | None`` accepts null, ``dict[str, V]`` checks each
value; ints are not bools, floats accept ints. A dataclass's own ``__post_init__`` checks values
and raises ValueError; the reader prefixes the field's path (``model.head_dim``).
"""

from __future__ import annotations

import types
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")


class FieldError(ValueError):
    """A field is missing, unknown, or of the wrong type or value; the message names it."""

    def __init__(self, message: str, known: list[str] | None = None) -> None:
        super().__init__(message)
        self.known = known  # the field names the object allows, for an unknown-field error


def read_dataclass(cls: type[T], value: Any, where: str = "") -> T:
    """``value`` (a JSON object) as an instance of the dataclass ``cls``; unknown keys are refused."""
    name = where or "the document"
    if not isinstance(value, dict):
        raise FieldError(f"{name} must be an object, got {type(value).__name__}")
    allowed = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise FieldError(f"{name} has unknown field(s) {unknown}", known=sorted(allowed))
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        path = f"{where}.{f.name}" if where else f.name
        if f.name in value:
            kwargs[f.name] = _value(hints[f.name], value[f.name], path)
        elif f.default is MISSING and f.default_factory is MISSING:
            raise FieldError(f"{path} is missing")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as err:
        raise FieldError(f"{name}: {err}") from None


def _value(kind: Any, value: Any, path: str) -> Any:
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType):
        return _optional(args, value, path)
    if origin is tuple:
        return _tuple(args[0], value, path)
    if origin is dict:
        return _dict(args[1], value, path)
    if is_dataclass(kind):
        return read_dataclass(kind, value, path)  # type: ignore[arg-type]
    return _scalar(kind, value, path)


def _optional(args: tuple[Any, ...], value: Any, path: str) -> Any:
    """`X | None`: None, or an X."""
    if value is None and type(None) in args:
        return None
    (inner,) = [a for a in args if a is not type(None)]
    return _value(inner, value, path)


def _tuple(item: Any, value: Any, path: str) -> tuple[Any, ...]:
    """`tuple[X, ...]` from a JSON list."""
    if not isinstance(value, list):
        raise FieldError(f"{path} must be a list, got {type(value).__name__}")
    return tuple(_value(item, v, f"{path}[{i}]") for i, v in enumerate(value))


def _dict(item: Any, value: Any, path: str) -> dict[str, Any]:
    """`dict[str, X]` from a JSON object (X = Any: taken as it is)."""
    if not isinstance(value, dict):
        raise FieldError(f"{path} must be an object, got {type(value).__name__}")
    if item is Any:
        return value
    return {str(k): _value(item, v, f"{path}.{k}") for k, v in value.items()}


def _scalar(kind: Any, value: Any, path: str) -> Any:
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        bool: isinstance(value, bool),
        str: isinstance(value, str),
    }
    if kind not in ok:
        raise TypeError(f"no reader for {kind!r} at {path}")  # a schema bug, not bad input
    if not ok[kind]:
        raise FieldError(f"{path} must be {kind.__name__}, got {value!r}")
    return float(value) if kind is float else value
