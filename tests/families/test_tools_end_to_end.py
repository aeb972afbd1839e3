"""A tool call end to end on a real engine (issue 29): the tiny Qwen2's GPTQ artifact behind a real
daemon and the real gateway, driven by the official SDK.

The gateway renders the prompt with the model's own template (tools/template.py): the daemon's
prompt is transformers' `apply_chat_template(messages, tools=...)`, token for token. With
`tool_choice: required` the grammar (tools/grammar.py) makes even random weights write a call in
Qwen's Hermes syntax, its `<tool_call>` tags as the vocabulary's single tokens, which the family's
parser reads back. Reuses the session's Qwen2 build (tests/families/conftest.py): `-m slow`, as
every family but phi3 in test_end_to_end.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import jsonschema
import pytest
from openai.types.chat import ChatCompletionToolParam

from edgellm.cli import main
from edgellm.client.aio import connect
from edgellm.common.channel import ChannelSecurity
from edgellm.device.rpc.server import RunningDaemon
from edgellm.gateway.config import GatewayConfig
from edgellm.gateway.params import parse
from edgellm.gateway.server import start_gateway
from edgellm.gateway.tools.template import tool_template
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.families.conftest import family_build
from tests.gateway.conftest import KEY, sdk
from tests.tiny_families import chat_tokenizer

CITY: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}},
    "required": ["city"],
}
PICK: ChatCompletionToolParam = {
    "type": "function",
    "function": {"name": "pick_city", "description": "Pick a city.", "parameters": CITY},
}
MESSAGES: list[Any] = [{"role": "user", "content": "Which city should I visit?"}]


@pytest.mark.slow
async def test_a_required_tool_call_on_tiny_qwen2_is_rendered_by_its_template_and_parsed_back(
    daemon: RunningDaemon, tmp_path_factory: pytest.TempPathFactory
) -> None:
    build = family_build("qwen2", tmp_path_factory)
    target = f"127.0.0.1:{daemon.port}"
    assert (
        await asyncio.to_thread(main, ["push", str(build.gptq), "--target", target, "--insecure-loopback"])
        == 0
    )
    [artifact] = daemon.core.store.installed()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        await stub.LoadModel(device_pb2.LoadModelRequest(model=artifact.artifact_id))
        status = await stub.GetStatus(device_pb2.GetStatusRequest())
    tok = chat_tokenizer("qwen2")
    template = tool_template(status.model)  # what the gateway reads from the daemon's status
    assert template is not None and template.syntax == "hermes"
    tags = dict(template.tokens)
    assert {t: tags.get(t) for t in ("<tool_call>", "</tool_call>")} == {
        t: tok.convert_tokens_to_ids(t) for t in ("<tool_call>", "</tool_call>")
    }
    want = tok.apply_chat_template(MESSAGES, tools=[PICK], add_generation_prompt=True, tokenize=True)
    want = list(want["input_ids"] if not isinstance(want, list) else want)
    rendered = parse("chat", {"messages": MESSAGES, "tools": [PICK]}, 256, template=template).params.prompt
    loaded = daemon.core.models.loaded
    assert loaded is not None and loaded.engine.encode(rendered) == want  # the device's ids of it

    config = GatewayConfig(target=target, port=0, api_key=KEY, telemetry_period_s=0.2)
    gateway = await start_gateway(config, connect(config.target, ChannelSecurity.insecure_loopback()))
    try:
        async with sdk(gateway) as client:
            reply = await client.chat.completions.create(
                model="", messages=MESSAGES, tools=[PICK], tool_choice="required",
                parallel_tool_calls=False, temperature=0, max_tokens=64, logprobs=True,
            )  # fmt: skip
    finally:
        await gateway.stop()
    assert reply.usage is not None and reply.usage.prompt_tokens == len(want)  # the daemon's prompt
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "pick_city"
    jsonschema.validate(json.loads(call.function.arguments), CITY)
    assert choice.logprobs is not None and choice.logprobs.content
    assert choice.logprobs.content[0].token == "<tool_call>"  # the tag's one token, on MNN
