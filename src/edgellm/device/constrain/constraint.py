"""What a request asks its output to match: a JSON schema, any JSON object, a regex or a Lark grammar."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ConstraintKind(StrEnum):
    """The kinds of constraint GenerateRequest.constraint can carry (the proto oneof's names)."""

    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"
    REGEX = "regex"
    LARK_GRAMMAR = "lark_grammar"


@dataclass(frozen=True)
class Constraint:
    """One output constraint; `text` is the schema, regex or grammar (empty for JSON_OBJECT)."""

    kind: ConstraintKind
    text: str = ""
