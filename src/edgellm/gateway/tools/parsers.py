"""Tool calls read back from a model's text, in each family's own syntax (one registry).

- `hermes`: Qwen2.5 / Hermes, `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, one
  block per call (the gateway's own prompt and grammar use it);
- `smollm2`: SmolLM2's, the same tags around a list, `<tool_call>[{"name": ..., ...}]</tool_call>`;
- `llama3`: Llama-3.1/3.2's JSON, the whole answer `{"name": ..., "parameters": {...}}` (optionally
  after `<|python_tag|>`, several separated by `;`);
- `mistral`: `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`, or the v11 tokenizer's
  `[TOOL_CALLS]name[ARGS]{...}`.
"""

from __future__ import annotations

import json
import re
import secrets
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_WRAPPED = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_V11 = re.compile(r"\s*([A-Za-z0-9_-]{1,64})\[ARGS\]")
_PYTHON_TAG = "<|python_tag|>"


@dataclass(frozen=True)
class ToolCall:
    """One call: the function's name, its arguments as JSON text, and an OpenAI-style id."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    def openai(self, index: int | None = None) -> dict[str, Any]:
        """The call as message.tool_calls[i] (with INDEX: as a stream delta's entry)."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        return out if index is None else {"index": index, **out}


@dataclass(frozen=True)
class Parsed:
    """A model's answer split into its text (None when only calls) and its calls."""

    content: str | None
    calls: tuple[ToolCall, ...] = ()


def _call(obj: Any, args_key: str = "arguments") -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get(args_key, obj.get("arguments", obj.get("parameters", {})))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


def _calls(value: Any, args_key: str = "arguments") -> list[ToolCall] | None:
    items = value if isinstance(value, list) else [value]
    calls = [_call(item, args_key) for item in items]
    return None if not calls or any(c is None for c in calls) else [c for c in calls if c is not None]


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _wrapped(text: str, want_list: bool) -> Parsed | None:
    """`<tool_call>` blocks (hermes: an object in each; smollm2: a list in each)."""
    blocks = list(_WRAPPED.finditer(text))
    if not blocks:
        return None
    calls: list[ToolCall] = []
    for block in blocks:
        value = _loads(block.group(1))
        if isinstance(value, list) != want_list:
            return None
        found = _calls(value)
        if found is None:
            return None
        calls += found
    content = _WRAPPED.sub("", text).strip()
    return Parsed(content or None, tuple(calls))


def hermes(text: str) -> Parsed | None:
    """Qwen2.5 / Hermes `<tool_call>{...}</tool_call>` blocks."""
    return _wrapped(text, want_list=False)


def smollm2(text: str) -> Parsed | None:
    """SmolLM2's `<tool_call>[{...}, ...]</tool_call>`."""
    return _wrapped(text, want_list=True)


def llama3(text: str) -> Parsed | None:
    """Llama-3.1's JSON answer `{"name": ..., "parameters": {...}}` (`;`-separated for several)."""
    body = text.strip().removeprefix(_PYTHON_TAG).strip()
    if not body.startswith("{"):
        return None
    value = _loads(body)
    if value is None:
        value = [_loads(part) for part in body.split(";")]
    calls = _calls(value, "parameters")
    return Parsed(None, tuple(calls)) if calls else None


def mistral(text: str) -> Parsed | None:
    """Mistral's `[TOOL_CALLS][...]` (v3) or `[TOOL_CALLS]name[ARGS]{...}` (v11)."""
    head, sep, rest = text.partition(_MISTRAL)
    if not sep:
        return None
    calls: list[ToolCall] = []
    for part in rest.split(_MISTRAL):
        v11 = _MISTRAL_V11.match(part)
        if v11:
            found = _calls({"name": v11.group(1), "arguments": _loads(part[v11.end() :])})
        else:
            found = _calls(_loads(part.strip()))
        if found is None:
            return None
        calls += found
    return Parsed(head.strip() or None, tuple(calls))


FORMATS: dict[str, Callable[[str], Parsed | None]] = {
    "hermes": hermes,
    "smollm2": smollm2,
    "llama3": llama3,
    "mistral": mistral,
}


# How an answer that is a call begins, in any format above (after leading whitespace).
OPENERS = ("<tool_call>", _MISTRAL, _PYTHON_TAG, "{", "[{")


def opens_call(text: str) -> bool | None:
    """Whether TEXT (an answer so far) begins as a call: None while its start could still become one."""
    head = text.lstrip()
    if any(head.startswith(o) for o in OPENERS):
        return True
    if any(o.startswith(head) for o in OPENERS):
        return None
    return False


def parse_calls(text: str, names: set[str] | frozenset[str], syntax: str = "hermes") -> Parsed:
    """TEXT's calls in the first format that reads it whole (the model's own SYNTAX first); plain
    text when none does or a call names a function the request did not offer.

    Calls read in Mistral's syntax get Mistral's ids (9 letters and digits): its template refuses
    any other id when the client sends the call back in the next turn's history.
    """
    readers = [FORMATS[syntax], *(r for k, r in FORMATS.items() if k != syntax)]
    for reader in readers:
        parsed = reader(text)
        if parsed is not None and parsed.calls and all(c.name in names for c in parsed.calls):
            if syntax == "mistral":
                calls = tuple(ToolCall(c.name, c.arguments, mistral_id()) for c in parsed.calls)
                parsed = Parsed(parsed.content, calls)
            return parsed
    return Parsed(text)


def mistral_id() -> str:
    """A call id as Mistral's tokenizer and template take them: 9 characters of [A-Za-z0-9]."""
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))
