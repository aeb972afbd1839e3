"""The llguidance Lark grammar that makes the model's tool calls parse and validate, in its family's syntax.

`required` or a named function: the whole answer is calls (several with parallel calls), written
the way the model's family writes them (`Shape`): Hermes/Qwen `<tool_call>\\n{...}\\n</tool_call>`
blocks, SmolLM2's `<tool_call>[{...}, ...]</tool_call>`, Llama-3.1's bare `{"name": ...,
"parameters": {...}}` (`; ` between several) or Mistral's `[TOOL_CALLS] [{...}, ...]`. Each call's
JSON is llguidance's `%json` of an object whose name is one allowed function's and whose arguments
follow that function's `parameters` schema. `auto`: either free text that opens no call, or calls
as above; so every call the model writes is constrained from its first byte, and reads back with
that family's parser (parsers.py).

A tag that the model's vocabulary holds as one token (TOKENS, from the template's
`ChatTemplate.tokens`: Mistral's `[TOOL_CALLS]`, Qwen's `<tool_call>`) is written as that token,
llguidance's `<[id]>`, not as text: llguidance keeps special tokens out of text lexemes, so the
text would be spelled in ordinary tokens the model never wrote in training. The device streams a
token's bytes from tokens.bin (the tag's text), so the parsers read the same answer.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
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
    """How a family writes its calls: around all of them, between two, the arguments' key, the
    regex that free text must not match under `auto` (it would open a call), and a tag the calls
    may begin with where the vocabulary has it as one token."""

    open: str
    sep: str
    close: str
    text: str
    args: str = "arguments"
    lead: str = ""


_HERMES_TEXT = f"(.|\\n)*{re.escape(OPEN)}(.|\\n)*"
SHAPES: dict[Syntax, Shape] = {
    "hermes": Shape(OPEN + "\n", f"\n{CLOSE}\n{OPEN}\n", "\n" + CLOSE, _HERMES_TEXT),
    "smollm2": Shape(OPEN + "[", ", ", "]" + CLOSE, _HERMES_TEXT),
    # Llama-3.1/3.2: the whole answer is the JSON; text must not begin like one. Meta's reference
    # code (llama-models) begins it with <|python_tag|>, its website without: the model chooses.
    "llama3": Shape("", "; ", "", r"\s*\{(.|\n)*", args="parameters", lead="<|python_tag|>"),
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


def lark(spec: ToolSpec, syntax: Syntax = "hermes", tokens: Mapping[str, int] | None = None) -> str:
    """The grammar for SPEC's answer in SYNTAX, its tags as TOKENS' ids where it has them (see the
    module docstring)."""
    shape = SHAPES[syntax]
    tokens = tokens or {}
    fns = spec.allowed()
    items = "call (sep call)*" if spec.parallel else "call"
    lead = f"<[{tokens[shape.lead]}]>? " if shape.lead in tokens else ""
    calls = " ".join(part for part in (_seq(shape.open, tokens), items, _seq(shape.close, tokens)) if part)
    lines = [
        "start: calls" if spec.forced else "start: TEXT | calls",
        f"calls: {lead}{calls}",
        "call: " + " | ".join(f"fn{i}" for i in range(len(fns))),
    ]
    if spec.parallel:
        lines.append(f"sep: {_seq(shape.sep, tokens)}")
    lines += [f"fn{i}: %json {json.dumps(call_schema(fn, shape.args))}" for i, fn in enumerate(fns)]
    if not spec.forced:
        # Text that opens no call (llguidance's & and ~ on lexemes). Why not text then a call, as
        # Qwen2.5 sometimes writes: the lexer cannot end a free-text lexeme lazily before the
        # opening tag (a `text[lazy]` rule broke the grammar), so such a call would go unconstrained.
        lines.append(f"TEXT: /(.|\\n)+/ & ~/{shape.text}/")
    return "\n".join(lines) + "\n"


def _seq(text: str, tokens: Mapping[str, int]) -> str:
    """TEXT as a Lark sequence: each of TOKENS' texts in it as its token (`<[id]>`), the rest as
    string literals ('' for no text)."""
    if not text:
        return ""
    named = [t for t in sorted(tokens, key=len, reverse=True) if t and t in text]
    if not named:
        return json.dumps(text)
    parts = re.split("(" + "|".join(map(re.escape, named)) + ")", text)
    return " ".join(f"<[{tokens[p]}]>" if p in tokens else json.dumps(p) for p in parts if p)
