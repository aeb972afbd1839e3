"""Tool requests: what the device is sent (prompt and grammar), and each bad input's 400 naming its field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from edgellm.gateway.params import parse
from edgellm.gateway.tools.stream import Gate
from tests.fakes.fake_artifact import write_fake_artifact
from tests.gateway.conftest import StartDaemon, StartGateway, sdk

CAP = 256
CITY: Any = {
    "type": "function",
    "function": {
        "name": "pick_city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Rome"]}},
            "required": ["city"],
        },
    },
}
USER: Any = {"role": "user", "content": "Where?"}
CALL: Any = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "pick_city", "arguments": '{"city": "Rome"}'},
}


def _chat(**extra: Any) -> dict[str, Any]:
    return {"messages": [USER], "tools": [CITY], **extra}


def test_the_tools_go_into_the_system_turn_and_the_calls_into_a_grammar() -> None:
    parsed = parse("chat", _chat(messages=[{"role": "system", "content": "Be brief."}, USER]), CAP)
    (role, system), user = parsed.messages
    assert role == "system" and system.startswith("Be brief.\n\n# Tools") and '"name": "pick_city"' in system
    assert user == ("user", "Where?")
    grammar = parsed.params.constraint
    assert grammar is not None and grammar.kind == "lark_grammar"
    assert grammar.text.startswith("start: TEXT | calls") and '"const": "pick_city"' in grammar.text
    assert parsed.tools is not None and parsed.tools.choice == "auto"


def test_required_and_no_parallel_calls_make_the_whole_answer_one_call() -> None:
    parsed = parse("chat", _chat(tool_choice="required", parallel_tool_calls=False), CAP)
    assert parsed.params.constraint is not None
    assert parsed.params.constraint.text.startswith(
        'start: calls\ncalls: "<tool_call>\\n" call "\\n</tool_call>"\n'
    )
    assert "SEP" not in parsed.params.constraint.text


def test_tool_choice_none_sends_a_plain_chat() -> None:
    parsed = parse("chat", _chat(tool_choice="none"), CAP)
    assert parsed.tools is None and parsed.params.constraint is None
    assert parsed.messages == (("user", "Where?"),)


def test_earlier_calls_and_their_results_are_written_as_the_model_writes_them() -> None:
    messages = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    parsed = parse("chat", _chat(messages=messages, tool_choice="none"), CAP)
    assert parsed.messages[1:] == (
        ("assistant", '<tool_call>\n{"name": "pick_city", "arguments": {"city": "Rome"}}\n</tool_call>'),
        ("user", "<tool_response>\nsunny\n</tool_response>"),
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (_chat(tool_choice={"type": "function", "function": {"name": "nowhere"}}), "tool_choice"),
        (_chat(tool_choice="sometimes"), "tool_choice"),
        ({"messages": [USER], "tool_choice": "required"}, "tool_choice"),
        (_chat(tools=[{"type": "function", "function": {"name": "a b"}}]), "tools[0].function.name"),
        (_chat(tools=[CITY, CITY]), "tools"),
        (_chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]),
         "tools[0].function.parameters"),
        (_chat(parallel_tool_calls="yes"), "parallel_tool_calls"),
        (_chat(response_format={"type": "json_object"}), "response_format"),
        (_chat(messages=[USER, {"role": "tool", "content": "sunny"}]), "messages[1].tool_call_id"),
        (_chat(messages=[USER, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]),
         "messages[1].tool_call_id"),
        (_chat(messages=[USER, {"role": "assistant", "tool_calls": [{**CALL, "function": {
            "name": "pick_city", "arguments": "{not json"}}]}]),
         "messages[1].tool_calls[0].function.arguments"),
        (_chat(messages=[{**USER, "tool_call_id": "call_1"}]), "messages[0].tool_call_id"),
    ],
)  # fmt: skip
async def test_bad_tool_input_is_a_400_naming_the_field(
    start_daemon: StartDaemon, start_gw: StartGateway, body: dict[str, Any], param: str
) -> None:
    gw = await start_gw(await start_daemon())
    async with sdk(gw) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="fake-model", **body)
    assert caught.value.status_code == 400 and caught.value.param == param, caught.value.message


async def test_a_schema_llguidance_rejects_is_a_400_naming_tools(
    start_daemon: StartDaemon, start_gw: StartGateway, tmp_path: Path
) -> None:
    artifact = write_fake_artifact(tmp_path / "art", hf_tokenizer=True)
    gw = await start_gw(await start_daemon(model=artifact))
    bad: Any = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"colour": {"type": "colour"}}}}}  # fmt: skip
    async with sdk(gw) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="fake-model",
                messages=[USER],
                tools=[bad],
                tool_choice="required",
            )
    assert caught.value.param == "tools" and "colour" in caught.value.message


async def test_a_named_function_is_called_even_by_a_model_that_wants_to_talk(
    start_daemon: StartDaemon, start_gw: StartGateway, tmp_path: Path
) -> None:
    # The fake model wants to say " The capital of France is Paris." forever; the grammar wins.
    artifact = write_fake_artifact(tmp_path / "art", hf_tokenizer=True)
    gw = await start_gw(await start_daemon(model=artifact, endless=True))
    async with sdk(gw) as client:
        reply = await client.chat.completions.create(
            model="fake-model",
            messages=[USER],
            tools=[CITY],
            tool_choice={"type": "function", "function": {"name": "pick_city"}},
            temperature=0,
            max_tokens=200,
        )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "pick_city"
    assert json.loads(call.function.arguments) in ({"city": "Paris"}, {"city": "Rome"})


async def test_a_text_answer_under_auto_streams_token_by_token(
    start_daemon: StartDaemon, start_gw: StartGateway, tmp_path: Path
) -> None:
    # The fake model says " The capital of France is Paris."; the grammar lets text through.
    artifact = write_fake_artifact(tmp_path / "art", hf_tokenizer=True)
    gw = await start_gw(await start_daemon(model=artifact))
    ask: dict[str, Any] = {"model": "fake-model", "messages": [USER], "tools": [CITY], "temperature": 0}
    async with sdk(gw) as client:
        whole = await client.chat.completions.create(**ask)
        stream = await client.chat.completions.create(**ask, stream=True)
        deltas = [c.choices[0].delta for c in [c async for c in stream] if c.choices]
    texts = [d.content for d in deltas if d.content]
    assert len(texts) > 3 and "".join(texts) == whole.choices[0].message.content
    assert whole.choices[0].finish_reason == "stop" and not whole.choices[0].message.tool_calls
    assert not any(d.tool_calls for d in deltas)


@pytest.mark.parametrize(
    ("pieces", "sent"),
    [
        (["", " The", " capital"], [None, " The", " capital"]),  # text: streams once it is text
        (["<tool", "_call>", "\n{"], [None, None, None]),  # a call: held to the end
        (["<", "b>", " bold"], [None, "<b>", " bold"]),  # a tag that is no call
        (["{", '"a"'], [None, None]),  # could be Llama's JSON call: held
    ],
)
def test_the_stream_gate_holds_an_answer_only_while_it_may_be_a_call(
    pieces: list[str], sent: list[str | None]
) -> None:
    gate = Gate()
    assert [gate.feed(p) for p in pieces] == sent


async def test_a_streamed_call_sends_role_then_call_deltas_then_finish_then_usage(
    start_daemon: StartDaemon, start_gw: StartGateway, tmp_path: Path
) -> None:
    artifact = write_fake_artifact(tmp_path / "art", hf_tokenizer=True)
    gw = await start_gw(await start_daemon(model=artifact, endless=True))
    async with sdk(gw) as client:
        stream = await client.chat.completions.create(
            model="fake-model",
            messages=[USER],
            tools=[CITY],
            tool_choice="required",
            parallel_tool_calls=False,
            temperature=0,
            max_tokens=200,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
    first, *middle, finish, usage = chunks
    assert first.choices[0].delta.role == "assistant" and not first.choices[0].delta.tool_calls
    head, *pieces = [c.choices[0].delta.tool_calls[0] for c in middle if c.choices[0].delta.tool_calls]
    assert head.index == 0 and head.id and head.function and head.function.name == "pick_city"
    arguments = "".join(p.function.arguments or "" for p in pieces if p.function)
    assert json.loads(arguments) in ({"city": "Paris"}, {"city": "Rome"})
    assert finish.choices[0].finish_reason == "tool_calls"
    assert usage.choices == [] and usage.usage and usage.usage.completion_tokens > 0
