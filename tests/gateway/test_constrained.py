"""response_format through the gateway to a device that enforces it (fake engine, tokenizer.json)."""

from __future__ import annotations

import json
from pathlib import Path

from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat

from tests.fakes.fake_artifact import write_fake_artifact
from tests.gateway.conftest import StartDaemon, StartGateway, sdk

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the capital of France?"}]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}},
    "required": ["city"],
    "additionalProperties": False,
}


async def test_response_format_is_answered_with_json_that_matches_it(
    start_daemon: StartDaemon, start_gw: StartGateway, tmp_path: Path
) -> None:
    # The fake model wants to say " The capital of France is Paris." forever; the constraint wins.
    # json_object is left to the real model (tests/constrain): the fake's flat logits would spell
    # an endless key.
    artifact = write_fake_artifact(tmp_path / "art", hf_tokenizer=True)
    gw = await start_gw(await start_daemon(model=artifact, endless=True))
    async with sdk(gw) as client:
        reply = await client.chat.completions.create(
            model="fake-model",
            messages=QUESTION,
            response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}},
            temperature=0,
            max_tokens=200,
        )
    value = json.loads(reply.choices[0].message.content or "")
    assert value in ({"city": "Paris"}, {"city": "Rome"})
    assert reply.choices[0].finish_reason == "stop"


async def test_a_constrained_answer_cut_by_max_tokens_says_length_streamed_or_not(
    start_daemon: StartDaemon, start_gw: StartGateway, tmp_path: Path
) -> None:
    # The JSON needs more than 3 tokens: the client must learn it is cut off, not get "stop".
    artifact = write_fake_artifact(tmp_path / "art", hf_tokenizer=True)
    gw = await start_gw(await start_daemon(model=artifact, endless=True))
    fmt: ResponseFormat = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}
    async with sdk(gw) as client:
        reply = await client.chat.completions.create(
            model="fake-model", messages=QUESTION, response_format=fmt, max_tokens=3
        )
        assert reply.choices[0].finish_reason == "length"
        stream = await client.chat.completions.create(
            model="fake-model", messages=QUESTION, response_format=fmt, max_tokens=3, stream=True
        )
        reasons = [c.choices[0].finish_reason async for c in stream if c.choices]
    assert reasons[-1] == "length"
