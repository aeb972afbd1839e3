"""OpenAI request bodies → GenerateParams, checked; any field we do not implement is a 400 naming it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from edgellm.client.params import SPECULATION, Constraint, GenerateParams, SpeculationName
from edgellm.client.sampling import RECOMMENDED
from edgellm.gateway.config import Limits
from edgellm.gateway.errors import ApiError, invalid, unsupported
from edgellm.gateway.scoring import Prompt, Scoring, chat_scoring, completion_scoring, prompts
from edgellm.gateway.tools.grammar import lark
from edgellm.gateway.tools.prompt import TOOL_ROLE, assistant_text, tool_result, with_tools
from edgellm.gateway.tools.spec import ToolSpec, tool_spec
from edgellm.gateway.tools.template import Syntax, ToolTemplate, template_message
from edgellm.v1 import device_pb2

Kind = Literal["chat", "completion"]

# Fields both endpoints implement, then each endpoint's own.
_COMMON = frozenset(
    {
        "model", "max_tokens", "temperature", "top_p", "seed", "stop", "presence_penalty",
        "frequency_penalty", "logit_bias", "stream", "stream_options", "user",
        # llama-server's extensions, sent with the SDK's extra_body
        "top_k", "min_p", "repetition_penalty",
        # edgellm's own, also by extra_body: "auto" | "off" | "fast" (docs/speculation.md)
        "speculation",
    }
)  # fmt: skip
_CHAT = _COMMON | {
    "messages", "max_completion_tokens", "response_format", "tools", "tool_choice", "parallel_tool_calls",
    "logprobs", "top_logprobs",
}  # fmt: skip
_COMPLETION = _COMMON | {"prompt", "logprobs", "echo"}
# Fields we accept only at their default (the value that asks for nothing we lack).
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "logprobs": (False, None),
    "top_logprobs": (None, 0),
    "echo": (False,),
    "best_of": (1,),
    "suffix": (None, ""),
    # chat takes these (tools/); a completion only at their default
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "parallel_tool_calls": (None,),
    "functions": (None, []),
    "function_call": (None, "none"),
    "store": (None, False),
}
_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": TOOL_ROLE,
}
# The keys a message may carry beside role and content, per role.
_EXTRA = {"assistant": ("tool_calls",), "tool": ("tool_call_id",)}
MAX_STOP = 4  # OpenAI's limit
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
UINT32 = 2**32  # the wire's top_k, token ids and max_new_tokens are uint32


@dataclass(frozen=True)
class Parsed:
    """A checked OpenAI request: the daemon request's parameters (no session yet) and the answer's shape."""

    kind: Kind
    params: GenerateParams
    model: str
    stream: bool = False
    include_usage: bool = False
    user: str = ""
    # The conversation as the gateway folds it (tools/prompt.py): what the device renders on the
    # fallback path, and always the session fingerprint's text (sessions.py).
    messages: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    tools: ToolSpec | None = None  # the calls the answer may make (None: plain text)
    scoring: Scoring = field(default_factory=Scoring)  # logprobs and echo (scoring.py)
    # A completion's prompts, one request each (`params` is the first); a chat's is (params,).
    batch: tuple[GenerateParams, ...] = ()
    # How the model writes calls: its template's syntax, or the Hermes fallback prompt's.
    syntax: Syntax = "hermes"

    def with_ids(self, request_id: str, session_id: str) -> Parsed:
        """This request with the device request id and session set (on every prompt of the batch)."""
        batch = tuple(
            replace(p, request_id=request_id, session_id=session_id) for p in self.batch or (self.params,)
        )
        return replace(self, params=batch[0], batch=batch)

    @property
    def request(self) -> device_pb2.GenerateRequest:
        """The GenerateRequest to send (a new message on each read)."""
        return self.params.to_proto()


def parse(
    kind: Kind,
    body: Any,
    max_tokens_cap: int,
    limits: Limits | None = None,
    defaults: GenerateParams = RECOMMENDED,
    template: ToolTemplate | None = None,
) -> Parsed:
    """Check an OpenAI body and build its GenerateParams; raise ApiError (400) naming the field.

    MAX_TOKENS_CAP is the daemon's cap (the chat default); LIMITS are the gateway's own caps;
    DEFAULTS give each sampling field the body leaves out (the loaded model's: sampling.for_model);
    TEMPLATE is the loaded model's chat template when it renders tools (tools/template.py): a chat
    with tools or tool turns is then rendered here and sent as raw text.
    """
    lim = limits or Limits()
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    _refuse_unknown(body, _CHAT if kind == "chat" else _COMPLETION)
    model = _opt(body, "model", str) or ""
    # Checked in this order so that a body with several faults gets the same 400 as before.
    sampling = _sampling(body, lim.max_logit_bias, defaults)
    stream, include_usage = _stream_options(body)
    scoring = chat_scoring(body) if kind == "chat" else completion_scoring(body)
    cap = min(max_tokens_cap, lim.max_tokens)
    default_max = cap if kind == "chat" else min(COMPLETION_DEFAULT_MAX_TOKENS, cap)
    # max_tokens 0 with echo: score the prompt, generate nothing.
    limit = _Cap(lim.max_tokens, max_tokens_cap)
    max_new_tokens = _max_tokens(body, default_max, limit, 0 if scoring.echo else 1)
    stop = tuple(_stop(body))
    speculation = _speculation(body)
    prompt, messages, constraint = _input(kind, body, lim.max_message_chars)
    tools = tool_spec(body) if kind == "chat" else None
    used = _rendered(kind, body, template)
    syntax: Syntax = _syntax(used)
    messages, constraint = _with_tools(messages, constraint, tools, syntax, used)
    params = GenerateParams(
        **_device_input(prompt, messages, used),
        max_new_tokens=max_new_tokens,
        stop=stop,
        # A prompt rendered with the loaded model's template is for that model only: pinned, so a
        # LoadModel of another since the last status is refused rather than fed a foreign prompt.
        model=_pinned(model, used),
        constraint=constraint,
        speculation=speculation,
        **sampling,
        **scoring.fields(),
    )
    batch = _batch(kind, body, params, stream, lim.max_message_chars)
    return Parsed(
        kind=kind,
        params=batch[0],
        model=model,
        stream=stream,
        include_usage=include_usage,
        user=_opt(body, "user", str) or "",
        messages=messages,
        tools=tools,
        scoring=scoring,
        batch=batch,
        syntax=syntax,
    )


def _batch(
    kind: Kind, body: dict[str, Any], params: GenerateParams, stream: bool, max_chars: int
) -> tuple[GenerateParams, ...]:
    """One GenerateParams per prompt of a completion (a chat has one: PARAMS)."""
    if kind == "chat":
        return (params,)
    batch = tuple(_with_prompt(params, p) for p in prompts(body, max_chars))
    if len(batch) > 1 and stream:
        raise unsupported("prompt", "a list of prompts is answered without stream")
    return batch


def _with_prompt(params: GenerateParams, prompt: Prompt) -> GenerateParams:
    if isinstance(prompt, str):
        return replace(params, prompt=prompt)
    return replace(params, prompt_token_ids=prompt)


def _with_tools(
    messages: tuple[tuple[str, str], ...],
    constraint: Constraint | None,
    tools: ToolSpec | None,
    syntax: Syntax,
    used: tuple[str, ToolTemplate] | None,
) -> tuple[tuple[tuple[str, str], ...], Constraint | None]:
    """The chat as the fallback prompt writes it (tools in the system turn; without them when the
    model's template rendered the prompt (USED): then it only keys the session, and `tool_choice:
    none` must not change the key), and the calls' grammar in SYNTAX, its tags as the template's
    single tokens, as its constraint."""
    messages = with_tools(messages, tools if used is None else None)
    if tools is None:
        return messages, constraint
    if constraint is not None:
        raise invalid(
            "'response_format' cannot be combined with tools; give tool_choice 'none'", "response_format"
        )
    tags = dict(used[1].tokens) if used is not None else {}
    return messages, Constraint("lark_grammar", lark(tools, syntax, tags))


def _rendered(
    kind: Kind, body: dict[str, Any], template: ToolTemplate | None
) -> tuple[str, ToolTemplate] | None:
    """A chat with tools or tool turns rendered with the model's TEMPLATE, and the template (None:
    a completion, no template, or a plain chat, which the device renders as before). The body was
    checked already."""
    if kind != "chat":
        return None
    raw = body["messages"]
    tool_turns = any(m.get("tool_calls") is not None or m.get("role") == "tool" for m in raw)
    if template is None or not (body.get("tools") or tool_turns):
        return None
    turns = [template_message(m, _text(m, i), _ROLES[m["role"]]) for i, m in enumerate(raw)]
    return template.render(turns, body.get("tools") or None), template


def _syntax(used: tuple[str, ToolTemplate] | None) -> Syntax:
    """How the model writes calls: its template's syntax, or the fallback prompt's (Hermes)."""
    return "hermes" if used is None else used[1].syntax


def _pinned(model: str, used: tuple[str, ToolTemplate] | None) -> str:
    """The request's model; a prompt rendered here is pinned to the artifact whose template it used."""
    return model or ("" if used is None else used[1].artifact_id)


def _device_input(
    prompt: str, messages: tuple[tuple[str, str], ...], used: tuple[str, ToolTemplate] | None
) -> dict[str, Any]:
    """What the device reads: the messages (its template renders them) or the prompt rendered here."""
    if used is None:
        return {"prompt": prompt, "messages": messages}
    return {"prompt": used[0], "messages": ()}


def _text(m: dict[str, Any], i: int) -> str:
    return "" if m.get("content") is None else _content(m["content"], i)


def _refuse_unknown(body: dict[str, Any], known: frozenset[str]) -> None:
    for key, value in body.items():
        if key in known:
            continue
        if key in _NEUTRAL:
            if value not in _NEUTRAL[key]:
                raise unsupported(key, f"only {_NEUTRAL[key][0]!r} is accepted")
            continue
        if value is not None:
            raise unsupported(key)


def _opt(body: dict[str, Any], key: str, kind: type) -> Any:
    value = body.get(key)
    if value is None:
        return None
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise invalid(f"'{key}' must be of type {kind.__name__}, got {type(value).__name__}", key)
    return value


def _input(
    kind: Kind, body: dict[str, Any], max_chars: int
) -> tuple[str, tuple[tuple[str, str], ...], Constraint | None]:
    """What the model reads: a chat's messages and response_format, or a completion's prompt."""
    if kind == "chat":
        return "", _messages(body, max_chars), _response_format(body)
    return "", (), None  # the prompts: scoring.prompts


def _stream_options(body: dict[str, Any]) -> tuple[bool, bool]:
    """(stream, stream_options.include_usage), checked."""
    stream = bool(_opt(body, "stream", bool))
    options = _opt(body, "stream_options", dict) or {}
    if options and not stream:
        raise invalid("stream_options is only allowed when stream is true", "stream_options")
    for key in options:
        if key != "include_usage":
            raise unsupported(f"stream_options.{key}")
    return stream, bool(options.get("include_usage"))


def _number(body: dict[str, Any], key: str, lo: float, hi: float) -> float | None:
    value = _opt(body, key, float)
    if value is None:
        return None
    if math.isnan(value) or not lo <= value <= hi:
        raise invalid(f"'{key}' must be between {lo:g} and {hi:g}, got {value}", key)
    return float(value)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _sampling(body: dict[str, Any], max_logit_bias: int, d: GenerateParams) -> dict[str, Any]:
    """The sampling fields of GenerateParams, as keyword arguments; an omitted one is D's."""
    # Why not OpenAI's defaults (temperature 1, top_p 1, no penalty): the bundled small model
    # answers nonsense at temperature 1 ("capital of France" -> French word salad). An omitted
    # field takes the model's own default instead, as Ollama does: its generation_config's, or
    # the measured ones for the bundled SmolLM2 (edgellm.client.sampling).
    out: dict[str, Any] = {
        "temperature": _or(_number(body, "temperature", 0.0, 2.0), d.temperature),
        "top_p": _or(_number(body, "top_p", 0.0, 1.0), d.top_p) or 1.0,
        "presence_penalty": _or(_number(body, "presence_penalty", -2.0, 2.0), d.presence_penalty),
        "frequency_penalty": _or(_number(body, "frequency_penalty", -2.0, 2.0), d.frequency_penalty),
        "min_p": _or(_number(body, "min_p", 0.0, 1.0), d.min_p),
        "repetition_penalty": _repetition(body, d.repetition_penalty),
        "top_k": d.top_k,
    }
    top_k = _opt(body, "top_k", int)
    if top_k is not None:
        if not 0 <= top_k < UINT32:
            raise invalid(f"'top_k' must be within 0..{UINT32 - 1} (0 = off), got {top_k}", "top_k")
        out["top_k"] = top_k
    seed = _opt(body, "seed", int)
    if seed is not None:
        if not 0 <= seed < 2**64:
            raise invalid(f"'seed' must be a non-negative 64-bit integer, got {seed}", "seed")
        out["seed"] = seed
    out["logit_bias"] = tuple(_logit_bias(body, max_logit_bias).items())
    return out


def _repetition(body: dict[str, Any], default: float) -> float:
    """repetition_penalty; an explicit 0 is no penalty, sent as the neutral 1."""
    value = _number(body, "repetition_penalty", 0.0, 10.0)
    return default if value is None else value or 1.0


def _speculation(body: dict[str, Any]) -> SpeculationName:
    value = _opt(body, "speculation", str) or RECOMMENDED.speculation
    if value not in SPECULATION:
        raise invalid(f"'speculation' must be one of {', '.join(SPECULATION)}, got {value!r}", "speculation")
    return cast(SpeculationName, value)


def _logit_bias(body: dict[str, Any], max_entries: int) -> dict[int, float]:
    """OpenAI's logit_bias: token ids (as JSON object keys, so strings) → bias in -100..100."""
    raw = _opt(body, "logit_bias", dict) or {}
    if len(raw) > max_entries:
        raise invalid(f"logit_bias takes at most {max_entries} entries, got {len(raw)}", "logit_bias")
    out: dict[int, float] = {}
    for key, value in raw.items():
        # Digits only, and at most 10 of them: int() would also take " 1", "1_0" and 4,300 digits.
        if not (isinstance(key, str) and 0 < len(key) <= 10 and key.isascii() and key.isdigit()):
            raise invalid(f"logit_bias keys must be token ids, got {key[:40]!r}", "logit_bias")
        token = int(key)
        if token >= UINT32 or isinstance(value, bool) or not isinstance(value, int | float):
            raise invalid(f"logit_bias[{key!r}] must map a token id >= 0 to a number", "logit_bias")
        if not -100 <= value <= 100:
            raise invalid(f"logit_bias[{key!r}] must be between -100 and 100, got {value}", "logit_bias")
        out[token] = float(value)
    return out


@dataclass(frozen=True)
class _Cap:
    """The gateway's --max-tokens-cap and the daemon's --max-new-tokens-cap: the lower one binds."""

    gateway: int
    daemon: int

    def check(self, key: str, given: int) -> None:
        # Checked here, in the API's words: past the daemon's cap its refusal would name its own
        # wire field (max_new_tokens), which an OpenAI client never sent.
        if self.gateway <= self.daemon:
            cap, whose = self.gateway, "the gateway's --max-tokens-cap"
        else:
            cap, whose = self.daemon, "the device daemon's --max-new-tokens-cap"
        if given > cap:
            raise invalid(f"'{key}' must be at most {cap} ({whose}), got {given}", key)


def _max_tokens(body: dict[str, Any], default: int, cap: _Cap, low: int = 1) -> int:
    value = None
    for key in ("max_completion_tokens", "max_tokens"):
        given = _opt(body, key, int)
        if given is not None:
            if given < low:
                hint = "" if low == 0 else " (0 only with echo: scoring the prompt)"
                raise invalid(f"'{key}' must be at least {low}, got {given}{hint}", key)
            cap.check(key, given)
            value = given if value is None else value
    return default if value is None else value


def _stop(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise invalid("'stop' must be a string or a list of strings", "stop")
    if len(items) > MAX_STOP:
        raise invalid(f"'stop' takes at most {MAX_STOP} sequences, got {len(items)}", "stop")
    return [s for s in items if s]


def _messages(body: dict[str, Any], max_chars: int) -> tuple[tuple[str, str], ...]:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise invalid("'messages' must be a non-empty list", "messages")
    out = []
    call_ids: set[str] = set()
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise invalid(f"messages[{i}] must be an object", f"messages[{i}]")
        role = m.get("role")
        if role not in _ROLES:
            raise invalid(
                f"messages[{i}].role must be one of {sorted(_ROLES)}, got {role!r}", f"messages[{i}].role"
            )
        for key in m:
            if key not in ("role", "content", *_EXTRA.get(role, ())) and m[key] is not None:
                raise unsupported(f"messages[{i}].{key}")
        text = _turn(m, i, call_ids)
        if len(text) > max_chars:
            raise invalid(
                f"messages[{i}].content has {len(text)} characters; the gateway's cap is {max_chars}",
                f"messages[{i}].content",
            )
        out.append((_ROLES[role], text))
    return tuple(out)


def _turn(m: dict[str, Any], i: int, call_ids: set[str]) -> str:
    """A message's text; an assistant's calls and a tool's result written out (tools/prompt.py)."""
    if m.get("tool_calls") is not None:
        content = "" if m.get("content") is None else _content(m.get("content"), i)
        text, ids = assistant_text(content, m["tool_calls"], i)
        call_ids.update(ids)
        return text
    text = _content(m.get("content"), i)
    return tool_result(m, text, i, call_ids) if m["role"] == "tool" else text


def _content(content: Any, i: int) -> str:
    """A message's text: a string, or a list of text parts (other part types are unsupported)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise unsupported(f"messages[{i}].content[{j}]", f"only text parts are, not {kind!r}")
            texts.append(part["text"])
        return "".join(texts)
    raise invalid(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content")


def _response_format(body: dict[str, Any]) -> Constraint | None:
    """response_format → the device's output constraint (text: none; json_object; json_schema)."""
    fmt = _opt(body, "response_format", dict)
    if fmt is None or fmt.get("type") == "text":
        return None
    kind = fmt.get("type")
    if kind == "json_object":
        return Constraint("json_object")
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise invalid(
                "response_format.json_schema.schema must be a JSON Schema object", "response_format"
            )
        return Constraint("json_schema", json.dumps(schema))
    raise invalid(
        f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}",
        "response_format",
    )


__all__ = ["ApiError", "GenerateParams", "Parsed", "parse"]
