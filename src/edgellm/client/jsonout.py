"""Protobuf messages as the JSON every `--json` flag prints: one convention for all commands.

snake_case field names (as in the .proto), every field present (zeros too, so core 0 is
`{"cpu": 0, ...}` rather than `{}`), enums by name, and 64-bit integers as JSON numbers:
protobuf's JSON mapping writes them as strings (for JavaScript's 53-bit numbers), which
`jq`/Python users then have to convert; our values (bytes, kHz, counters) stay far below 2^53.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

_INT64 = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def message_dict(message: Message) -> dict[str, Any]:
    """The message as a plain dict in the convention above."""
    raw = MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    descriptor: Descriptor = message.DESCRIPTOR  # type: ignore[assignment]  # upb or pure descriptor
    return _numbers(raw, descriptor)


def message_json(message: Message, indent: int | None = 2) -> str:
    """message_dict as JSON text."""
    return json.dumps(message_dict(message), indent=indent)


def _numbers(d: dict[str, Any], descriptor: Descriptor) -> dict[str, Any]:
    """Fields in .proto order, 64-bit integers as numbers, nested messages likewise."""
    return {f.name: _convert(d[f.name], f) for f in descriptor.fields if f.name in d}


def _convert(value: Any, field: FieldDescriptor) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {k: _convert(v, value_field) for k, v in value.items()}
    if isinstance(value, list):
        return [_scalar(v, field) for v in value]
    return _scalar(value, field)


def _scalar(value: Any, field: FieldDescriptor) -> Any:
    if field.type in _INT64 and isinstance(value, str):
        return int(value)
    if field.message_type is not None and isinstance(value, dict):
        return _numbers(value, field.message_type)
    return value
