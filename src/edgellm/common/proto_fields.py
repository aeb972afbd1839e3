"""One typed mapping from a dataclass to a protobuf message whose fields carry the same names.

Why: copying `x=s.x` field by field between two shapes that already agree is where a new field
gets forgotten (the message then says 0 and nobody notices). Fields whose names or types differ
(enums, nested messages, repeated dataclasses) are given by the caller and win over the copy.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

from google.protobuf.message import Message

M = TypeVar("M", bound=Message)

__all__ = ["copied", "shared_names"]


def shared_names(message_type: type[Message], source: Any) -> frozenset[str]:
    """The field names the message type and the dataclass (type or instance) SOURCE both have."""
    if not is_dataclass(source):
        raise TypeError(f"{source!r} is not a dataclass")
    return frozenset(f.name for f in message_type.DESCRIPTOR.fields) & {f.name for f in fields(source)}


def copied(message_type: type[M], source: Any, skip: Collection[str] = (), **given: Any) -> M:
    """A MESSAGE_TYPE with every same-named field of the dataclass SOURCE copied, GIVEN set on top.

    SKIP names shared fields the caller sets after construction (or leaves unset).
    """
    names = shared_names(message_type, source) - given.keys() - set(skip)
    return message_type(**{name: getattr(source, name) for name in names}, **given)
