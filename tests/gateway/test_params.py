"""OpenAI bodies → GenerateRequest: every implemented parameter lands in the daemon's request."""

from __future__ import annotations

import json

import openai
import pytest

from edgellm.client.sampling import RECOMMENDED
from edgellm.gateway.errors import ApiError
from edgellm.gateway.params import parse
from edgellm.v1 import device_pb2
from tests.gateway.conftest import StartDaemon, StartGateway, sdk

CAP = 512


def test_every_listed_chat_parameter_reaches_the_request() -> None:
    body = {
        "model": "smollm2", "messages": [{"role": "developer", "content": "Be brief."},
                                         {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "max_completion_tokens": 40, "temperature": 0.7, "top_p": 0.9, "seed": 11, "stop": "\n\n",
        "presence_penalty": 0.5, "frequency_penalty": -0.25, "logit_bias": {"42": -100, "7": 3.5},
        "stream": True, "stream_options": {"include_usage": True}, "user": "alice",
        "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "n": 1, "logprobs": False,
        "speculation": "fast",
    }  # fmt: skip
    parsed = parse("chat", body, CAP)
    r = parsed.request
    s = r.sampling
    assert r.model == "smollm2" and r.max_new_tokens == 40 and list(r.stop) == ["\n\n"]
    assert [(m.role, m.content) for m in r.messages] == [("system", "Be brief."), ("user", "Hi")]
    assert s.temperature == pytest.approx(0.7) and s.top_p == pytest.approx(0.9) and s.seed == 11
    assert s.presence_penalty == pytest.approx(0.5) and s.frequency_penalty == pytest.approx(-0.25)
    assert dict(s.logit_bias) == {42: -100.0, 7: 3.5}
    assert s.top_k == 20 and s.min_p == pytest.approx(0.05) and s.repetition_penalty == pytest.approx(1.1)
    assert parsed.stream and parsed.include_usage and parsed.user == "alice"
    assert not r.HasField("constraint")
    assert r.speculation == device_pb2.SPECULATION_FAST


def test_speculation_defaults_to_auto_and_refuses_an_unknown_mode() -> None:
    msgs = [{"role": "user", "content": "x"}]
    assert parse("chat", {"messages": msgs}, CAP).request.speculation == device_pb2.SPECULATION_AUTO
    assert parse("completion", {"prompt": "x", "speculation": "off"}, CAP).request.speculation == (
        device_pb2.SPECULATION_OFF
    )
    with pytest.raises(ApiError) as caught:
        parse("chat", {"messages": msgs, "speculation": "always"}, CAP)
    assert caught.value.status == 400 and caught.value.param == "speculation"
    assert "auto, off, fast" in str(caught.value)


def test_defaults_are_the_bundled_models_not_openais() -> None:
    """Omitted sampling fields take edgellm's measured defaults (OpenAI's T=1 gives word salad)."""
    chat = parse("chat", {"messages": [{"role": "user", "content": "x"}]}, CAP).request
    s = chat.sampling
    assert s.temperature == pytest.approx(RECOMMENDED.temperature) and chat.max_new_tokens == CAP
    assert s.top_p == pytest.approx(RECOMMENDED.top_p)
    assert s.frequency_penalty == pytest.approx(RECOMMENDED.frequency_penalty)
    explicit = parse("chat", {"messages": [{"role": "user", "content": "x"}], "temperature": 0}, CAP)
    assert explicit.request.sampling.temperature == 0.0  # an explicit 0 stays greedy
    assert not chat.sampling.HasField("seed")
    completion = parse("completion", {"prompt": "x"}, CAP).request
    assert completion.prompt == "x" and completion.max_new_tokens == 16 and not completion.messages


def test_response_format_becomes_the_constraint() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    msgs = [{"role": "user", "content": "x"}]
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    r = parse("chat", {"messages": msgs, "response_format": fmt}, CAP).request
    assert json.loads(r.constraint.json_schema) == schema
    r = parse("chat", {"messages": msgs, "response_format": {"type": "json_object"}}, CAP).request
    assert r.constraint.json_object
    r = parse("chat", {"messages": msgs, "response_format": {"type": "text"}}, CAP).request
    assert not r.HasField("constraint")
    with pytest.raises(ApiError) as caught:
        parse("chat", {"messages": msgs, "response_format": {"type": "grammar"}}, CAP)
    assert caught.value.param == "response_format"


def test_a_completion_refuses_chat_only_fields() -> None:
    with pytest.raises(ApiError) as caught:
        parse("completion", {"prompt": "x", "messages": []}, CAP)
    assert caught.value.status == 400 and caught.value.param == "messages"


async def test_penalties_change_a_greedy_answer_that_repeats(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    # The fake's scripted token leads by 4 logits: two repeats at penalty 2 erase its lead.
    gw = await start_gw(await start_daemon(reply=" la la la la"))
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "Sing"}]
    async with sdk(gw) as client:

        async def answer(frequency_penalty: float = 0.0, presence_penalty: float = 0.0) -> str:
            a = await client.chat.completions.create(
                model="fake-model",
                messages=messages,
                temperature=0,
                frequency_penalty=frequency_penalty,
                presence_penalty=presence_penalty,
            )
            return a.choices[0].message.content or ""

        plain = await answer()
        by_frequency = await answer(frequency_penalty=2.0)
        by_presence = await answer(presence_penalty=2.0, frequency_penalty=1.0)
    assert plain == " la la la la"
    assert len(by_frequency) < len(plain) and plain.startswith(by_frequency)
    assert len(by_presence) < len(plain) and plain.startswith(by_presence)
