"""`tools`, `tool_choice` and `parallel_tool_calls` of a chat request, checked (400 naming the field)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from edgellm.gateway.errors import invalid

# OpenAI's rule for a function name.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS = 128  # OpenAI's limit
_MODES = ("none", "auto", "required")


@dataclass(frozen=True)
class Function:
    """One tool: a function's name, description and parameters (a JSON Schema object)."""

    name: str
    description: str
    parameters: dict[str, Any]

    def declaration(self) -> dict[str, Any]:
        """The function as OpenAI's tools list carries it (what the prompt shows the model)."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["parameters"] = self.parameters
        return {"type": "function", "function": out}


@dataclass(frozen=True)
class ToolSpec:
    """What a request allows: its functions, the choice ('auto', 'required' or one name) and parallelism."""

    functions: tuple[Function, ...]
    choice: str  # "auto" | "required" | a function's name ("none" never makes a ToolSpec)
    parallel: bool = True

    @property
    def forced(self) -> bool:
        """Whether the whole answer must be calls (required, or a named function)."""
        return self.choice != "auto"

    def allowed(self) -> tuple[Function, ...]:
        """The functions the answer may call."""
        if self.choice in ("auto", "required"):
            return self.functions
        return tuple(f for f in self.functions if f.name == self.choice)


def tool_spec(body: dict[str, Any]) -> ToolSpec | None:
    """The request's tools, or None when it has none or says tool_choice 'none'."""
    functions = _functions(body.get("tools"))
    choice = _choice(body.get("tool_choice"), functions)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise invalid("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    if not functions or choice == "none":
        return None
    return ToolSpec(functions, choice, parallel is not False)


def _functions(raw: Any) -> tuple[Function, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_TOOLS:
        raise invalid(f"'tools' must be a list of at most {MAX_TOOLS} tools", "tools")
    out: list[Function] = []
    for i, tool in enumerate(raw):
        out.append(_function(tool, i))
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise invalid("tools must have distinct function names", "tools")
    return tuple(out)


def _function(tool: Any, i: int) -> Function:
    where = f"tools[{i}]"
    if (
        not isinstance(tool, dict)
        or tool.get("type") != "function"
        or not isinstance(tool.get("function"), dict)
    ):
        raise invalid(f"{where} must be {{'type': 'function', 'function': {{...}}}}", where)
    fn = tool["function"]
    name = fn.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise invalid(
            f"{where}.function.name must match {_NAME.pattern}, got {name!r}", f"{where}.function.name"
        )
    description = fn.get("description") or ""
    if not isinstance(description, str):
        raise invalid(f"{where}.function.description must be a string", f"{where}.function.description")
    params = _parameters(fn.get("parameters"), where)
    for key in fn:
        if key not in ("name", "description", "parameters", "strict"):
            raise invalid(f"{where}.function.{key} is not a function field", f"{where}.function.{key}")
    return Function(name, description, params)


def _parameters(params: Any, where: str) -> dict[str, Any]:
    """A function's parameters: a JSON Schema object (none: no arguments)."""
    if params is None:
        return {"type": "object", "properties": {}}
    if not isinstance(params, dict) or params.get("type", "object") != "object":
        raise invalid(
            f"{where}.function.parameters must be a JSON Schema of type 'object'",
            f"{where}.function.parameters",
        )
    return params


def _choice(raw: Any, functions: tuple[Function, ...]) -> str:
    """tool_choice: 'none' | 'auto' | 'required' | {'type': 'function', 'function': {'name': ...}}."""
    if raw is None:
        return "auto" if functions else "none"
    if isinstance(raw, str):
        if raw not in _MODES:
            raise invalid(
                f"'tool_choice' must be one of {', '.join(_MODES)} or a function, got {raw!r}", "tool_choice"
            )
        name = raw
    elif isinstance(raw, dict) and raw.get("type") == "function" and isinstance(raw.get("function"), dict):
        name = raw["function"].get("name")
        if name not in {f.name for f in functions}:
            raise invalid(
                f"tool_choice names {json.dumps(name)}, which is not one of the tools", "tool_choice"
            )
        return str(name)
    else:
        raise invalid(
            "'tool_choice' must be a string or {'type': 'function', 'function': {'name': ...}}", "tool_choice"
        )
    if name != "none" and not functions:
        raise invalid(f"tool_choice {name!r} needs 'tools'", "tool_choice")
    return name
