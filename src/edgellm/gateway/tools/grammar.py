"""The llguidance Lark grammar that makes the model's tool calls parse and validate, in its family's syntax.

`required` or a named function: the whole answer is calls (several with parallel calls), written
the way the model's family writes them (`Shape`): Hermes/Qwen `<tool_call>\\n{...}\\n</tool_call>`
blocks, SmolLM2's `<tool_call>[{...}, ...]</tool_call>`, Llama-3.1's bare `{"name": ...,
"parameters": {...}}` (`; ` between several) or Mistral's `[TOOL_CALLS] [{...}, ...]`. Each call's
JSON is llguidance's `%json` of an object whose name is one allowed function's and whose arguments
follow that function's `parameters` schema. `auto`: either free text that opens no call, or calls
as above; so every call the model writes is constrained from its first byte, and reads back with
that family's parser (parsers.py).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from edgellm.common.closed_schema import close_objects
from edgellm.gateway.tools.prompt import CLOSE, OPEN
from edgellm.gateway.tools.spec import Function, ToolSpec
from edgellm.gateway.tools.template import Syntax

# Why fixed separators: they are the ones json.dumps writes and the templates' `tojson` and the
# fallback prompt show, so a call the model wrote reads back byte for byte the way the next turn's
# history renders it (the device's session cache then reuses the whole prefix); and a small model
# sampled at 0.8 cannot spend its budget on whitespace (docs/constrained.md).
_COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@dataclass(frozen=True)
class Shape:
    """How a family writes its calls: around all of them, between two, the arguments' key, and the
    regex that free text must not match under `auto` (it would open a call)."""

    open: str
    sep: str
    close: str
    text: str
    args: str = "arguments"


_HERMES_TEXT = f"(.|\\n)*{re.escape(OPEN)}(.|\\n)*"
SHAPES: dict[Syntax, Shape] = {
    "hermes": Shape(OPEN + "\n", f"\n{CLOSE}\n{OPEN}\n", "\n" + CLOSE, _HERMES_TEXT),
    "smollm2": Shape(OPEN + "[", ", ", "]" + CLOSE, _HERMES_TEXT),
    # Llama-3.1/3.2: the whole answer is the JSON; text must not begin like one.
    "llama3": Shape("", "; ", "", r"\s*\{(.|\n)*", args="parameters"),
    "mistral": Shape("[TOOL_CALLS] [", ", ", "]", r"(.|\n)*\[TOOL_CALLS\](.|\n)*"),
}


def call_schema(fn: Function, args: str = "arguments") -> dict[str, Any]:
    """The JSON Schema of one call's object: {"name": <this name>, ARGS: <its parameters>}."""
    return {
        "type": "object",
        "properties": {
            "name": {"const": fn.name},
            # objects closed unless they say otherwise, as the daemon does for response_format
            args: close_objects(copy.deepcopy(fn.parameters)),
        },
        "required": ["name", args],
        "additionalProperties": False,
        "x-guidance": _COMPACT,
    }


def lark(spec: ToolSpec, syntax: Syntax = "hermes") -> str:
    """The grammar for SPEC's answer in SYNTAX (see the module docstring)."""
    shape = SHAPES[syntax]
    fns = spec.allowed()
    items = "call (SEP call)*" if spec.parallel else "call"
    calls = " ".join(part for part in (_literal(shape.open), items, _literal(shape.close)) if part)
    lines = [
        "start: calls" if spec.forced else "start: TEXT | calls",
        f"calls: {calls}",
        "call: " + " | ".join(f"fn{i}" for i in range(len(fns))),
    ]
    if spec.parallel:
        lines.append(f"SEP: {json.dumps(shape.sep)}")
    lines += [f"fn{i}: %json {json.dumps(call_schema(fn, shape.args))}" for i, fn in enumerate(fns)]
    if not spec.forced:
        # Text that opens no call (llguidance's & and ~ on lexemes). Why not text then a call, as
        # Qwen2.5 sometimes writes: the lexer cannot end a free-text lexeme lazily before the
        # opening tag (a `text[lazy]` rule broke the grammar), so such a call would go unconstrained.
        lines.append(f"TEXT: /(.|\\n)+/ & ~/{shape.text}/")
    return "\n".join(lines) + "\n"


def _literal(text: str) -> str:
    return json.dumps(text) if text else ""
