"""The fallback tool prompt (Hermes / Qwen2.5 format): tools in the system turn, calls and results as text.

Used when the model's own template cannot render tools (template.py decides: no template, no tools
section, a call syntax we do not parse, or no jinja2 on the phone); the bundled SmolLM2's template
has no tools section. The device renders the chat template with MNN's jinja, whose
`apply_chat_template` takes (role, content) pairs only (pymnn 3.x), so the gateway writes the tool
declarations, the assistant's earlier calls and the tool results into ordinary system / assistant /
user turns, in the format Qwen2.5's own template renders (NousResearch Hermes function calling),
and the model's own template wraps those turns as usual.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from edgellm.gateway.errors import invalid
from edgellm.gateway.tools.spec import ToolSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"
TOOL_ROLE = "tool"  # the role tool results carry until with_tools() folds them into user turns

_INSTRUCTIONS = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


def call_text(name: str, arguments: Any) -> str:
    """One call as the model writes it (and as the grammar makes it write it)."""
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE}"


def system_block(spec: ToolSpec) -> str:
    """The tools section of the system turn."""
    tools = "\n".join(json.dumps(f.declaration(), ensure_ascii=False) for f in spec.functions)
    return _INSTRUCTIONS.format(tools=tools)


def assistant_text(content: str, tool_calls: Any, i: int) -> tuple[str, tuple[str, ...]]:
    """An assistant turn with calls: its text (content, then each call) and the calls' ids."""
    where = f"messages[{i}].tool_calls"
    if not isinstance(tool_calls, list):
        raise invalid(f"{where} must be a list", where)
    parts = [content] if content else []
    ids: list[str] = []
    for j, call in enumerate(tool_calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(fn, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(fn.get("name"), str)
        ):
            raise invalid(f"{where}[{j}] must carry an id and function.name", f"{where}[{j}]")
        try:
            arguments = json.loads(fn.get("arguments") or "{}")
        except (TypeError, ValueError):
            raise invalid(
                f"{where}[{j}].function.arguments must be a JSON string", f"{where}[{j}].function.arguments"
            ) from None
        parts.append(call_text(fn["name"], arguments))
        ids.append(call["id"])
    return "\n".join(parts), tuple(ids)


def history_text(content: str | None, calls: Sequence[Any]) -> str:
    """An answer with CALLS (parsers.ToolCall) as the next turn's history folds it once the client
    sends it back as `content` and `tool_calls` (assistant_text): the session fingerprint's text."""
    return assistant_text(content or "", [c.openai() for c in calls], 0)[0]


def tool_result(message: dict[str, Any], text: str, i: int, call_ids: set[str]) -> str:
    """A role 'tool' message's text, wrapped as Qwen2.5's template wraps it; its tool_call_id checked."""
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"messages[{i}] (role 'tool') must carry tool_call_id", f"messages[{i}].tool_call_id")
    if call_id not in call_ids:
        raise invalid(
            f"messages[{i}].tool_call_id {call_id!r} answers no earlier assistant tool call",
            f"messages[{i}].tool_call_id",
        )
    return f"<tool_response>\n{text}\n</tool_response>"


def with_tools(messages: Sequence[tuple[str, str]], spec: ToolSpec | None) -> tuple[tuple[str, str], ...]:
    """MESSAGES with the tools block in the system turn (when SPEC) and tool results as user turns.

    Consecutive tool results become one user turn, as Qwen2.5's template does.
    """
    out: list[tuple[str, str]] = []
    for role, text in messages:
        if role == TOOL_ROLE and out and out[-1][0] == TOOL_ROLE:
            out[-1] = (TOOL_ROLE, f"{out[-1][1]}\n{text}")
        else:
            out.append((role, text))
    folded = [("user" if role == TOOL_ROLE else role, text) for role, text in out]
    if spec is None:
        return tuple(folded)
    block = system_block(spec)
    if folded and folded[0][0] == "system":
        folded[0] = ("system", f"{folded[0][1]}\n\n{block}")
    else:
        folded.insert(0, ("system", block))
    return tuple(folded)
