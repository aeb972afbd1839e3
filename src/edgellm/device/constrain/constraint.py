"""What a request asks its output to match: a JSON schema, any JSON object, a regex or a Lark grammar."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from edgellm.common.errors import InvalidArgument

# Why 64 KiB: llguidance's compile time grows with the text (a 58 KiB schema of 2,000 properties
# took 0.34 s on the build host, 3,000 took 1 s) and it runs on the single engine worker, so a
# bigger one stalls every other request; real schemas and grammars are a few KiB (finding L13).
MAX_CONSTRAINT_BYTES = 64 * 1024


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


def check_constraint_size(field: str, text: str) -> None:
    """InvalidArgument naming the limit when a constraint's text is over MAX_CONSTRAINT_BYTES."""
    size = len(text.encode("utf-8"))
    if size > MAX_CONSTRAINT_BYTES:
        raise InvalidArgument(
            f"{field} is {size} bytes; at most {MAX_CONSTRAINT_BYTES} (64 KiB) are accepted: simplify it"
        )
