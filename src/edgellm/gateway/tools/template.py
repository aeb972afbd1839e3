"""A conversation with tools rendered by the model's own chat template, as transformers renders it.

The device renders plain chats with MNN's jinja, whose `apply_chat_template` takes (role, content)
pairs only (pymnn 3.x): no `tools`, no assistant `tool_calls`, no `tool_call_id`. So for a request
with tools the gateway renders the prompt itself from the template the artifact carries
(`ArtifactInfo.chat_template`) and sends it as raw text; the device tokenizes it as it tokenizes
its own rendering. The environment is transformers' (`chat_template_utils._compile_jinja_template`):
jinja2's ImmutableSandboxedEnvironment with trim_blocks/lstrip_blocks, loop controls, a `tojson`
that keeps non-ASCII and `raise_exception`/`strftime_now`; `{% generation %}` renders its body.

A template is used for tools only when rendering a probe tool shows the tool's name (its `tools`
branch exists) and its text names a call syntax the gateway parses and constrains (`SYNTAXES`);
otherwise the Hermes fallback prompt (prompt.py) serves, and the log says why once per template.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from edgellm.common.logs import get_logger
from edgellm.gateway.errors import invalid
from edgellm.v1 import common_pb2

log = get_logger(__name__)

Syntax = Literal["hermes", "smollm2", "llama3", "mistral"]
# How a template writes (or tells the model to write) a call, checked in this order on its source:
# Mistral's tag, SmolLM2's list in the Hermes tags, Hermes/Qwen tags, Llama-3.1's "parameters" JSON.
SYNTAXES: tuple[tuple[str, Syntax], ...] = (
    ("[TOOL_CALLS]", "mistral"),
    ("<tool_call>[", "smollm2"),
    ("<tool_call>", "hermes"),
    ('"parameters"', "llama3"),
)
_PROBE = "edgellm_probe_function"
_PROBE_TOOL = {
    "type": "function",
    "function": {"name": _PROBE, "description": "probe", "parameters": {"type": "object", "properties": {}}},
}


@dataclass(frozen=True)
class ToolTemplate:
    """A model's chat template that renders tools, the call syntax it teaches, and its artifact."""

    template: Any  # a compiled jinja2 Template
    syntax: Syntax
    artifact_id: str
    specials: tuple[tuple[str, str], ...] = ()  # (name, token): bos_token, eos_token when set
    # The vocabulary's single tokens the template names (ChatTemplate.tokens): text -> id, for the
    # grammar to write a call tag as its token (grammar.py).
    tokens: tuple[tuple[str, int], ...] = ()

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """The prompt text ending with the assistant's generation prompt; 400 where the template raises."""
        from jinja2 import TemplateError

        try:
            text = self.template.render(
                messages=messages,
                tools=tools,
                documents=None,
                add_generation_prompt=True,
                **dict(self.specials),
            )
        except (TemplateError, TypeError, ValueError) as err:
            raise invalid(f"the model's chat template refuses this conversation: {err}", "messages") from None
        return str(text)


def tool_template(info: common_pb2.ArtifactInfo | None) -> ToolTemplate | None:
    """The loaded model's template when it renders tools in a syntax we parse, else None (fallback)."""
    if info is None or not info.HasField("chat_template") or not info.chat_template.template:
        return None
    t = info.chat_template
    tokens = tuple(sorted(t.tokens.items()))
    return _compiled(t.template, t.bos_token, t.eos_token, info.artifact_id, tokens)


@functools.lru_cache(maxsize=8)
def _compiled(
    source: str, bos: str, eos: str, artifact_id: str, tokens: tuple[tuple[str, int], ...] = ()
) -> ToolTemplate | None:
    specials = tuple((k, v) for k, v in (("bos_token", bos), ("eos_token", eos)) if v)
    try:
        template = _environment().from_string(source)
    except ImportError:  # the phone's pure-Python install has no jinja2 (pyproject: the gateway extra)
        log.info("tool_prompt_fallback", artifact=artifact_id[:12], reason="jinja2 is not installed")
        return None
    except Exception as err:  # noqa: BLE001  (any template jinja2 cannot compile: the fallback serves)
        log.info(
            "tool_prompt_fallback", artifact=artifact_id[:12], reason=f"template does not compile: {err}"
        )
        return None
    syntax = next((s for marker, s in SYNTAXES if marker in source), None)
    tool = ToolTemplate(template, syntax or "hermes", artifact_id, specials, tokens)
    why = _unusable(tool, syntax)
    if why:
        log.info("tool_prompt_fallback", artifact=artifact_id[:12], reason=why)
        return None
    log.info("tool_prompt_template", artifact=artifact_id[:12], syntax=syntax, tokens=dict(tokens))
    return tool


def _unusable(tool: ToolTemplate, syntax: Syntax | None) -> str:
    """Why TOOL cannot render tool prompts ('' when it can)."""
    try:
        probe = tool.render([{"role": "user", "content": "hi"}], [_PROBE_TOOL])
    except Exception as err:  # noqa: BLE001  (a template that fails on the probe: the fallback serves)
        return f"the template fails with tools: {err}"
    if _PROBE not in probe:
        return "the template has no tools section"
    if syntax is None:
        return "the template's call syntax is none of " + ", ".join(m for m, _ in SYNTAXES)
    return ""


def _environment() -> Any:
    """transformers' chat-template environment (see the module docstring)."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """`{% generation %}...{% endgeneration %}` (transformers' assistant-mask marker): its body."""

        tags = {"generation"}  # noqa: RUF012  (jinja2's Extension API: a plain class attribute)

        def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def template_message(message: dict[str, Any], text: str, role: str) -> dict[str, Any]:
    """One OpenAI message as chat templates take it (transformers' convention): ROLE (developer is
    system), TEXT as content, an assistant's calls with their arguments as objects, a tool's call id."""
    out: dict[str, Any] = {"role": role, "content": text}
    calls = message.get("tool_calls")
    if calls is not None:
        if message.get("content") is None:
            out["content"] = None
        out["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": json.loads(call["function"].get("arguments") or "{}"),
                },
            }
            for call in calls
        ]
    if role == "tool":
        out["tool_call_id"] = message["tool_call_id"]
    return out
