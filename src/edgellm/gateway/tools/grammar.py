"""The llguidance Lark grammar that makes the model's tool calls parse and validate.

`required` or a named function: the whole answer is one call (or several, with parallel calls),
each `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>` where the JSON is llguidance's
`%json` of an object whose name is one allowed function's and whose arguments follow that
function's `parameters` schema. `auto`: either free text with no call in it, or calls as above;
so every call the model writes is constrained from its first byte.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from edgellm.common.closed_schema import close_objects
from edgellm.gateway.tools.prompt import CLOSE, OPEN
from edgellm.gateway.tools.spec import Function, ToolSpec

# Why fixed separators: they are the ones json.dumps writes and the prompt shows, so a call the
# model wrote reads back byte for byte the way the gateway re-renders it in the next turn's
# history (the device's session cache then reuses the whole prefix); and a small model sampled at
# 0.8 cannot spend its budget on whitespace (docs/constrained.md).
_COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def call_schema(fn: Function) -> dict[str, Any]:
    """The JSON Schema of one call's object: {"name": <this name>, "arguments": <its parameters>}."""
    return {
        "type": "object",
        "properties": {
            "name": {"const": fn.name},
            # objects closed unless they say otherwise, as the daemon does for response_format
            "arguments": close_objects(copy.deepcopy(fn.parameters)),
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
        "x-guidance": _COMPACT,
    }


def lark(spec: ToolSpec) -> str:
    """The grammar for SPEC's answer (see the module docstring)."""
    fns = spec.allowed()
    lines = [
        "start: calls" if spec.forced else "start: TEXT | calls",
        'calls: call ("\\n" call)*' if spec.parallel else "calls: call",
        f"call: {json.dumps(OPEN + chr(10))} body {json.dumps(chr(10) + CLOSE)}",
        "body: " + " | ".join(f"fn{i}" for i in range(len(fns))),
    ]
    lines += [f"fn{i}: %json {json.dumps(call_schema(fn))}" for i, fn in enumerate(fns)]
    if not spec.forced:
        # Text with no call in it (llguidance's & and ~ on lexemes). Why not text then a call, as
        # Qwen2.5 sometimes writes: the lexer cannot end a free-text lexeme lazily before the
        # opening tag (a `text[lazy]` rule broke the grammar), so such a call would go unconstrained.
        lines.append(f"TEXT: /(.|\\n)+/ & ~/(.|\\n)*{_escape(OPEN)}(.|\\n)*/")
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    """TEXT as a literal in a Lark /regex/ (re.escape keeps `<`, `>` bare: `\\<` means a word boundary)."""
    return re.escape(text).replace("/", "\\/")
