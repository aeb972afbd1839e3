"""Tool calling on the real default model: the official SDK and the OpenAI Agents SDK over real sockets.

The daemon runs the bundled SmolLM2-135M (its template has no tools section: the gateway's
Hermes fallback, docs/gateway.md); llguidance constrains every call, so even this model's calls
parse and validate.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest_asyncio
from openai.types.chat import ChatCompletionMessageParam

from edgellm.device.rpc.server import RunningDaemon
from tests.daemons import loopback_daemon
from tests.gateway.conftest import StartGateway, sdk
from tests.gateway.tool_schemas import TOOLS, WEATHER

QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the weather like in Paris today?"}
]


@pytest_asyncio.fixture
async def real_daemon(default_artifact: Path, tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    """The real default model behind a daemon on port 0."""
    async with loopback_daemon(default_artifact, tmp_path) as running:
        yield running


def _model(daemon: RunningDaemon) -> str:
    loaded = daemon.core.status().model
    assert loaded is not None
    return loaded.artifact.name


async def test_the_official_sdk_runs_a_get_weather_tool_loop(
    real_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    gw = await start_gw(real_daemon)
    async with sdk(gw) as client:
        first = await client.chat.completions.create(
            model=_model(real_daemon),
            messages=QUESTION,
            tools=[WEATHER],
            tool_choice="required",
            temperature=0,
        )
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls or []
        assert len(calls) >= 1 and calls[0].id.startswith("call_")
        call = calls[0]
        assert call.type == "function" and call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
        result = '{"temperature_c": 21, "sky": "sunny"}'
        history: list[Any] = [
            *QUESTION,
            {"role": "assistant", "tool_calls": [c.model_dump() for c in calls]},
            *({"role": "tool", "tool_call_id": c.id, "content": result} for c in calls),
        ]
        second = await client.chat.completions.create(
            model=_model(real_daemon), messages=history, tools=[WEATHER], temperature=0
        )
    answer = second.choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls
    assert answer.message.content
    # The call re-renders as the model wrote it, so the device's session cache holds the first turn
    # and most of the call (the tokenizer may split the re-rendered call differently from the model).
    assert second.usage and second.usage.prompt_tokens_details
    cached = second.usage.prompt_tokens_details.cached_tokens or 0
    assert first.usage and cached > first.usage.prompt_tokens


async def test_required_calls_over_five_schemas_sampled_at_0_8_always_validate(
    real_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    # bench/bench_tools.py runs the same with 50 samples.
    gw = await start_gw(real_daemon)
    schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in TOOLS}
    async with sdk(gw) as client:
        for seed in range(10):
            reply = await client.chat.completions.create(
                model=_model(real_daemon),
                messages=[{"role": "user", "content": "Plan my trip to Rome next week."}],
                tools=TOOLS,
                tool_choice="required",
                temperature=0.8,
                seed=seed,
                max_tokens=256,
            )
            choice = reply.choices[0]
            assert choice.finish_reason == "tool_calls", (seed, choice)
            for call in choice.message.tool_calls or []:
                assert call.type == "function"
                jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])


async def test_streamed_tool_call_deltas_reassemble_to_the_whole_answer(
    real_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    gw = await start_gw(real_daemon)
    ask: dict[str, Any] = {
        "model": _model(real_daemon),
        "messages": QUESTION,
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0,
        "seed": 7,
    }
    async with sdk(gw) as client:
        whole = await client.chat.completions.create(**ask)
        stream = await client.chat.completions.create(**ask, stream=True)
        calls: dict[int, dict[str, str]] = {}
        reasons = []
        async for chunk in stream:
            for c in chunk.choices:
                reasons.append(c.finish_reason)
                for d in c.delta.tool_calls or []:
                    entry = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                    if d.id:
                        assert not entry["id"], "the id comes once, in the call's first delta"
                        entry["id"] = d.id
                    if d.function and d.function.name:
                        entry["name"] = d.function.name
                    if d.function and d.function.arguments:
                        entry["arguments"] += d.function.arguments
    expected = [(c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls or []]
    assert expected and [(c["name"], c["arguments"]) for _, c in sorted(calls.items())] == expected
    assert all(c["id"].startswith("call_") for c in calls.values())
    assert reasons[-1] == "tool_calls" == whole.choices[0].finish_reason


async def test_the_openai_agents_sdk_runs_a_tool_loop_against_the_gateway(
    real_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)  # no internet: the tracing exporter would try OpenAI's servers
    gw = await start_gw(real_daemon)
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        asked.append(city)
        return f"It is sunny and 21 C in {city}."

    async with sdk(gw) as client:
        agent = Agent(
            name="weather",
            instructions="You answer questions about the weather.",
            tools=[get_weather],
            model=OpenAIChatCompletionsModel(model=_model(real_daemon), openai_client=client),
            # required once; the SDK resets tool_choice after the call (reset_tool_choice), so the
            # next turn may answer in text
            model_settings=ModelSettings(tool_choice="required", temperature=0),
        )
        result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
    assert asked, "the agent called get_weather"
    assert isinstance(result.final_output, str) and result.final_output
