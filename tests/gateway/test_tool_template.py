"""Tools rendered with the model's own chat template, and calls constrained in its family's syntax.

Templates: the families' fixtures (tests/fixtures/chat_templates) on the tiny families' tokenizer
(tests/tiny_families.chat_tokenizer). The gateway's rendered prompt, tokenized as transformers
tokenizes a rendered chat, must be transformers' `apply_chat_template(messages, tools=...)` ids.
Grammar-driven output comes from the fake engine (tests/fakes) behind a real daemon and gateway:
whatever it prefers, the grammar makes it write the family's syntax, which the family's parser reads.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import jsonschema
import pytest
from openai.types.chat import ChatCompletionToolParam

from edgellm.client.params import Constraint, GenerateParams
from edgellm.engine.chat_template import named_tokens
from edgellm.gateway.errors import ApiError
from edgellm.gateway.params import parse
from edgellm.gateway.tools.grammar import lark
from edgellm.gateway.tools.parsers import FORMATS
from edgellm.gateway.tools.spec import Function, ToolSpec
from edgellm.gateway.tools.template import Syntax, ToolTemplate, tool_template
from edgellm.host.convert.token_table import write_for_tokenizer
from edgellm.v1 import common_pb2, device_pb2_grpc
from tests.fakes.fake_artifact import PIECES, write_fake_artifact
from tests.gateway.conftest import StartDaemon, StartGateway, sdk
from tests.gateway.tool_schemas import TOOLS
from tests.tiny_families import chat_tokenizer as load_tokenizer

CAP = 256
# The families whose template renders tools, and the call syntax it teaches.
WITH_TOOLS: dict[str, Syntax] = {
    "qwen2": "hermes",
    "qwen3": "hermes",
    "llama3": "llama3",
    "mistral": "mistral",
    "smollm3": "hermes",
}
# Each syntax's tags that real tokenizers hold as one token (tests/tiny_families.CHAT adds them).
TAGS: dict[Syntax, tuple[str, ...]] = {
    "hermes": ("<tool_call>", "</tool_call>"),
    "smollm2": ("<tool_call>", "</tool_call>"),
    "llama3": ("<|python_tag|>",),
    "mistral": ("[TOOL_CALLS]",),
}
CALL_ID = "a1B2c3D4e"  # 9 letters and digits: Mistral's template takes no other
CITY: dict[str, object] = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}},
    "required": ["city"],
}
PICK: ChatCompletionToolParam = {
    "type": "function",
    "function": {"name": "pick_city", "description": "Pick one.", "parameters": CITY},
}


@functools.cache
def chat_tokenizer(family: str) -> Any:
    """The family's tiny chat tokenizer, loaded once per session (a few seconds each)."""
    return load_tokenizer(family)


def _template(family: str) -> ToolTemplate | None:
    tok = chat_tokenizer(family)
    info = common_pb2.ArtifactInfo(
        artifact_id="f" * 64,
        chat_template=common_pb2.ChatTemplate(
            template=tok.chat_template or "", bos_token=tok.bos_token or "", eos_token=tok.eos_token or ""
        ),
    )
    return tool_template(info)


def _conversations() -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(OpenAI messages, the same as transformers takes them) pairs: a first turn, and a tool round trip."""
    user = {"role": "user", "content": "What is the weather like in Paris?"}
    args = {"city": "Paris", "unit": "celsius"}
    call = {
        "id": CALL_ID,
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps(args)},
    }
    hf_call = {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": args}}
    result = {"role": "tool", "tool_call_id": CALL_ID, "content": '{"temperature": 21}'}
    return [
        ([user], [user]),
        (
            [user, {"role": "assistant", "content": None, "tool_calls": [call]}, result],
            [user, {"role": "assistant", "tool_calls": [hf_call]}, result],
        ),
    ]


@pytest.mark.parametrize("family", sorted(WITH_TOOLS))
def test_the_rendered_tool_prompt_has_transformers_ids(family: str) -> None:
    tok = chat_tokenizer(family)
    template = _template(family)
    assert template is not None and template.syntax == WITH_TOOLS[family]
    for messages, hf_messages in _conversations():
        body = {"messages": messages, "tools": TOOLS}
        parsed = parse("chat", body, CAP, template=template)
        assert parsed.params.messages == () and parsed.params.model == "f" * 64  # pinned to its model
        got = tok(parsed.params.prompt, add_special_tokens=False)["input_ids"]
        want = tok.apply_chat_template(hf_messages, tools=TOOLS, add_generation_prompt=True, tokenize=True)
        want = want["input_ids"] if not isinstance(want, list) else want
        assert got == list(want), family
        assert parsed.syntax == WITH_TOOLS[family]


@pytest.mark.parametrize("family", ["llama", "gemma2", "phi3"])
def test_a_template_without_tools_falls_back_to_the_hermes_prompt(family: str) -> None:
    template = _template(family)
    assert template is None
    parsed = parse("chat", {"messages": _conversations()[0][0], "tools": TOOLS}, CAP, template=template)
    assert parsed.params.prompt == "" and "<tools>" in parsed.params.messages[0][1]
    assert parsed.syntax == "hermes"


def test_a_plain_chat_is_rendered_on_the_device_even_with_a_tool_template() -> None:
    parsed = parse("chat", {"messages": _conversations()[0][0]}, CAP, template=_template("qwen2"))
    assert parsed.params.prompt == "" and parsed.params.messages == (
        ("user", "What is the weather like in Paris?"),
    )


def test_the_template_refusing_a_conversation_is_a_400_naming_messages() -> None:
    bad = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None, "tool_calls": [bad]},
        {"role": "tool", "tool_call_id": "call_1", "content": "x"},
    ]
    with pytest.raises(ApiError, match="length 9") as caught:  # Mistral's: "Tool call IDs should be ..."
        parse("chat", {"messages": messages, "tools": TOOLS}, CAP, template=_template("mistral"))
    assert caught.value.status == 400 and caught.value.param == "messages"


@pytest.mark.parametrize("syntax", ["hermes", "smollm2", "llama3", "mistral"])
async def test_each_syntax_grammar_makes_calls_its_parser_reads(
    syntax: Syntax, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    # The fake model wants " The capital of France is Paris." forever; the grammar wins.
    daemon = await start_daemon(model=write_fake_artifact(tmp_path / "art", hf_tokenizer=True), endless=True)
    spec = ToolSpec((Function("pick_city", "Pick one.", CITY),), "required", parallel=False)
    params = GenerateParams(
        prompt="Where?",
        max_new_tokens=120,
        temperature=0.0,
        constraint=Constraint("lark_grammar", lark(spec, syntax)),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        text = "".join([m.text async for m in stub.Generate(params.to_proto())])
    parsed = FORMATS[syntax](text)
    assert parsed is not None and len(parsed.calls) == 1, text
    assert parsed.calls[0].name == "pick_city"
    jsonschema.validate(json.loads(parsed.calls[0].arguments), CITY)


@pytest.mark.parametrize("family", sorted(WITH_TOOLS))
async def test_a_model_with_a_tool_template_is_prompted_and_constrained_in_its_syntax(
    family: str, start_daemon: StartDaemon, start_gw: StartGateway, tmp_path: Path
) -> None:
    tok = chat_tokenizer(family)
    jinja = {"chat_template": tok.chat_template, "bos": tok.bos_token or "", "eos": tok.eos_token or ""}
    # The fake's vocabulary spells most of a template's text byte by byte: a long context. It holds
    # the family's call tags as single special tokens, as the real tokenizers do.
    tags = TAGS[WITH_TOOLS[family]]
    artifact = write_fake_artifact(
        tmp_path / "art", context_length=8192, hf_tokenizer=True, chat_template=jinja, added=tags
    )
    gw = await start_gw(await start_daemon(model=artifact, endless=True))
    async with sdk(gw) as client:
        reply = await client.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "Where?"}],
            tools=[PICK],  # a free string argument: the fake would never end it
            tool_choice="required",
            parallel_tool_calls=False,
            temperature=0,
            max_tokens=200,
            logprobs=True,
        )
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    # The opening tag, where the template names it, is the tag's one token (its text in the stream).
    named = [t for t in tags if t in tok.chat_template]
    first = choice.logprobs.content[0].token
    assert first == (named[0] if named else "{"), [e.token for e in choice.logprobs.content[:4]]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice
    [call] = choice.message.tool_calls
    assert call.type == "function"
    assert call.function.name == "pick_city"
    jsonschema.validate(json.loads(call.function.arguments), CITY)
    if WITH_TOOLS[family] == "mistral":
        assert len(call.id) == 9 and call.id.isalnum()


@pytest.mark.parametrize("family", sorted(WITH_TOOLS))
def test_the_call_tags_a_template_names_travel_with_the_tokenizers_ids(family: str, tmp_path: Path) -> None:
    tok = chat_tokenizer(family)
    tok.save_pretrained(str(tmp_path))
    table = write_for_tokenizer(tok, tmp_path)
    got = named_tokens(tmp_path / "tokenizer.json", table, tok.chat_template, family)
    for tag in TAGS[WITH_TOOLS[family]]:
        in_vocab = tag in tok.get_added_vocab()
        assert got.get(tag) == (
            tok.convert_tokens_to_ids(tag) if in_vocab and tag in tok.chat_template else None
        )
    # Only what the template names: Qwen2's names its tags and its turn markers, never bos.
    assert all(t in tok.chat_template for t in got)
    if family in ("qwen2", "mistral"):
        template = _template(family)
        assert template is not None
        tagged = replace(template, tokens=tuple(got.items()))
        grammar = parse("chat", {"messages": _conversations()[0][0], "tools": TOOLS}, CAP, template=tagged)
        constraint = grammar.params.constraint
        assert constraint is not None
        for tag in TAGS[WITH_TOOLS[family]]:
            assert f"<[{got[tag]}]>" in constraint.text and json.dumps(tag) not in constraint.text


@pytest.mark.parametrize("syntax", ["hermes", "smollm2", "mistral"])
async def test_a_call_tag_the_vocabulary_holds_as_one_token_is_generated_as_that_token(
    syntax: Syntax, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    tags = TAGS[syntax]
    ids = {tag: len(PIECES) + i for i, tag in enumerate(tags)}  # write_fake_artifact's `added` ids
    artifact = write_fake_artifact(tmp_path / "art", hf_tokenizer=True, added=tags)
    daemon = await start_daemon(model=artifact, endless=True)
    # Several calls in Hermes blocks (the separator's tags are tokens too); one list otherwise (the
    # endless fake would fill it until max_new_tokens).
    spec = ToolSpec((Function("pick_city", "Pick one.", CITY),), "required", parallel=syntax == "hermes")
    params = GenerateParams(
        prompt="Where?",
        max_new_tokens=120,
        temperature=0.0,
        constraint=Constraint("lark_grammar", lark(spec, syntax, ids)),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        replies = [m async for m in stub.Generate(params.to_proto())]
    text = "".join(m.text for m in replies)
    tokens = [t for m in replies for t in m.token_ids]
    assert tokens[0] == ids[tags[0]] and text.startswith(tags[0]), text  # one token, its text streamed
    assert all(ids[t] in tokens for t in tags)
    parsed = FORMATS[syntax](text)
    assert parsed is not None and parsed.calls and parsed.calls[0].name == "pick_city", text


def test_llama3_calls_may_begin_with_the_python_tag_token() -> None:
    spec = ToolSpec((Function("pick_city", "Pick one.", CITY),), "required", parallel=False)
    assert lark(spec, "llama3", {"<|python_tag|>": 7}).splitlines()[1] == "calls: <[7]>? call"
    assert lark(spec, "llama3").splitlines()[1] == "calls: call"


@pytest.mark.parametrize("family", ["qwen2", "mistral"])
async def test_the_turn_after_a_template_rendered_call_reuses_its_device_session(
    family: str, start_daemon: StartDaemon, start_gw: StartGateway, tmp_path: Path
) -> None:
    # Mistral's calls read back in its own syntax; the next turn's history folds them to Hermes text
    # (the session fingerprint's): the gateway remembers the answer as that text.
    tok = chat_tokenizer(family)
    jinja = {"chat_template": tok.chat_template, "bos": tok.bos_token or "", "eos": tok.eos_token or ""}
    artifact = write_fake_artifact(
        tmp_path / "art",
        context_length=8192,
        hf_tokenizer=True,
        chat_template=jinja,
        added=TAGS[WITH_TOOLS[family]],
    )
    gw = await start_gw(await start_daemon(model=artifact, endless=True))
    messages: list[Any] = [{"role": "user", "content": "Where?"}]
    async with sdk(gw) as client:
        first = await client.chat.completions.create(
            model="fake-model", messages=messages, tools=[PICK], tool_choice="required",
            parallel_tool_calls=False, temperature=0, max_tokens=200,
        )  # fmt: skip
        [call] = first.choices[0].message.tool_calls or []
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"ok": true}'},
        ]
        second = await client.chat.completions.create(
            model="fake-model",
            messages=messages,
            tools=[PICK],
            tool_choice="none",
            temperature=0,
            max_tokens=4,
        )
    assert first.usage is not None and second.usage is not None
    details = second.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None
    # The first turn's prompt at least (its answer's end may re-tokenize differently).
    assert first.usage.prompt_tokens <= details.cached_tokens < second.usage.prompt_tokens
