"""The OpenAI API through the official SDK against a fake-engine daemon: shapes, usage, stop, seed."""

from __future__ import annotations

import openai
from openai.types.chat import ChatCompletionMessageParam

from edgellm.device.rpc.server import RunningDaemon
from edgellm.gateway.server import RunningGateway
from tests.fakes.fake_engine import DEFAULT_REPLY
from tests.gateway.conftest import StartDaemon, StartGateway, gateway_of, keyed_http, sdk

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the capital of France?"}]


async def test_a_chat_completion_answers_with_text_finish_reason_and_usage(
    client: openai.AsyncOpenAI,
) -> None:
    answer = await client.chat.completions.create(model="fake-model", messages=QUESTION, temperature=0)
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == DEFAULT_REPLY
    assert choice.finish_reason == "stop"
    assert answer.object == "chat.completion" and answer.model == "fake-model"
    u = answer.usage
    assert u is not None and u.prompt_tokens > 5 and u.completion_tokens > 3
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens == 0


async def test_a_streamed_chat_sends_deltas_then_finish_then_usage(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="fake-model",
        messages=QUESTION,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == DEFAULT_REPLY
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None and last.usage.completion_tokens > 3
    assert all(c.usage is None for c in chunks[:-1])


async def test_a_streamed_chat_without_include_usage_sends_no_usage(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="fake-model", messages=QUESTION, stream=True, temperature=0
    )
    chunks = [c async for c in stream]
    assert all(c.usage is None for c in chunks) and chunks[-1].choices[0].finish_reason == "stop"


async def test_completions_answer_raw_prompts_whole_and_streamed(client: openai.AsyncOpenAI) -> None:
    whole = await client.completions.create(
        model="fake-model", prompt="The capital of France", max_tokens=4, temperature=0
    )
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 4
    assert whole.choices[0].text == DEFAULT_REPLY[: len(whole.choices[0].text)] != ""
    stream = await client.completions.create(
        model="fake-model", prompt="The capital of France", max_tokens=4, stream=True, temperature=0
    )
    text = "".join([c.choices[0].text async for c in stream])
    assert text == whole.choices[0].text  # greedy: streamed and whole are the same four tokens


async def test_models_lists_the_daemons_model(client: openai.AsyncOpenAI) -> None:
    models = [m async for m in client.models.list()]
    assert [m.id for m in models] == ["fake-model"]


async def test_max_tokens_ends_with_finish_reason_length(client: openai.AsyncOpenAI) -> None:
    for field in ("max_tokens", "max_completion_tokens"):
        answer = await client.chat.completions.create(
            model="fake-model", messages=QUESTION, temperature=0, extra_body={field: 3}
        )
        assert answer.choices[0].finish_reason == "length"
        assert answer.usage is not None and answer.usage.completion_tokens == 3


async def test_a_stop_string_ends_the_answer_before_it(client: openai.AsyncOpenAI) -> None:
    answer = await client.chat.completions.create(
        model="fake-model", messages=QUESTION, temperature=0, stop=[" Paris", "zzz"]
    )
    assert answer.choices[0].message.content == " The capital of France is"
    assert answer.choices[0].finish_reason == "stop"


async def test_the_same_seed_gives_the_same_sampled_answer(client: openai.AsyncOpenAI) -> None:
    async def sample(seed: int) -> str:
        a = await client.chat.completions.create(
            model="fake-model", messages=QUESTION, temperature=2.0, seed=seed, max_tokens=12
        )
        return a.choices[0].message.content or ""

    first, again, other = await sample(7), await sample(7), await sample(8)
    assert first == again
    assert first != other  # the fake's logits leave room for sampling to differ


async def test_logit_bias_by_token_id_steers_the_answer(client: openai.AsyncOpenAI) -> None:
    # Token 3 + ord("x") is the byte "x" in the fake vocabulary (3 specials first).
    answer = await client.chat.completions.create(
        model="fake-model",
        messages=QUESTION,
        temperature=0,
        max_tokens=3,
        logit_bias={str(3 + ord("x")): 100},
    )
    assert answer.choices[0].message.content == "xxx"


async def test_a_second_turn_reports_cached_prompt_tokens(client: openai.AsyncOpenAI) -> None:
    first = await client.chat.completions.create(model="fake-model", messages=QUESTION, temperature=0)
    history: list[ChatCompletionMessageParam] = [
        *QUESTION,
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "And of Italy?"},
    ]
    second = await client.chat.completions.create(model="fake-model", messages=history, temperature=0)
    assert first.usage is not None and second.usage is not None
    details = second.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None
    assert first.usage.prompt_tokens <= details.cached_tokens < second.usage.prompt_tokens


def device_session(daemon: RunningDaemon) -> str:
    """The session whose conversation the daemon's one KV cache holds now."""
    loaded = daemon.core.models.loaded
    assert loaded is not None
    return loaded.cache.owner


def cached_total(gw: RunningGateway) -> float:
    """The gateway's count of prompt tokens the device served from a session cache."""
    return gateway_of(gw).registry.get_sample_value("edgellm_prompt_tokens_cached_total") or 0.0


async def test_an_explicit_session_header_keeps_the_cache_but_does_not_report_it(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    gw = await start_gw(await start_daemon())
    async with sdk(gw) as c:
        headers = {"X-Session-Id": "notebook-1"}
        a = await c.completions.create(
            model="fake-model", prompt="The river", max_tokens=2, extra_headers=headers
        )
        before = cached_total(gw)
        b = await c.completions.create(
            model="fake-model",
            prompt="The river" + a.choices[0].text + " sea",
            max_tokens=2,
            extra_headers=headers,
        )
    assert cached_total(gw) > before  # the device reused the session's cache
    # ...but a client-named session's answer says nothing of it (L4: no prefix oracle).
    assert b.usage is not None and b.usage.prompt_tokens_details is None
    assert b.model_extra is not None and "prompt_n" not in b.model_extra["timings"]


async def test_user_scopes_conversations(client: openai.AsyncOpenAI, fake_daemon: RunningDaemon) -> None:
    first = await client.chat.completions.create(
        model="fake-model", messages=QUESTION, temperature=0, user="alice"
    )
    alices = device_session(fake_daemon)
    history: list[ChatCompletionMessageParam] = [
        *QUESTION,
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "And of Italy?"},
    ]
    bob = await client.chat.completions.create(
        model="fake-model", messages=history, temperature=0, user="bob"
    )
    assert device_session(fake_daemon) != alices  # bob's copy of alice's conversation is a new session
    assert bob.usage is not None and bob.usage.prompt_tokens_details is not None
    assert bob.usage.prompt_tokens_details.cached_tokens == 0
    await client.chat.completions.create(model="fake-model", messages=history, temperature=0, user="alice")
    assert device_session(fake_daemon) == alices  # alice's own next turn finds her session


async def test_two_keys_with_the_same_session_header_never_share_a_session(
    fake_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    one = await start_gw(fake_daemon, api_key="key-one")
    two = await start_gw(fake_daemon, api_key="key-two")
    headers = {"X-Session-Id": "shared-name"}
    seen = []
    for gw, key in ((one, "key-one"), (two, "key-two"), (one, "key-one")):
        async with sdk(gw, api_key=key) as c:
            await c.chat.completions.create(
                model="fake-model", messages=QUESTION, max_tokens=2, extra_headers=headers
            )
        seen.append(device_session(fake_daemon))
    assert seen[0] != seen[1] and seen[0] == seen[2]
    assert all("shared-name" not in s for s in seen)  # the device never sees the client's id


async def test_answers_carry_llama_server_timings_from_the_device(client: openai.AsyncOpenAI) -> None:
    whole = await client.chat.completions.create(model="fake-model", messages=QUESTION, temperature=0)
    assert whole.model_extra is not None and whole.usage is not None
    t = whole.model_extra["timings"]
    assert t["prompt_n"] == whole.usage.prompt_tokens
    assert t["predicted_n"] == whole.usage.completion_tokens - 1
    assert t["prompt_ms"] > 0 and t["predicted_per_second"] > 0
    stream = await client.chat.completions.create(
        model="fake-model", messages=QUESTION, temperature=0, stream=True
    )
    finishing = [c async for c in stream if c.choices and c.choices[0].finish_reason]
    assert len(finishing) == 1 and finishing[0].model_extra is not None
    assert finishing[0].model_extra["timings"]["predicted_n"] == t["predicted_n"]


async def test_the_raw_stream_is_sse_ending_with_done(gateway: RunningGateway) -> None:
    body = {"model": "fake-model", "messages": QUESTION, "stream": True, "max_tokens": 3}
    async with (
        keyed_http(gateway) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line async for line in response.aiter_lines() if line]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]" and events.count("data: [DONE]") == 1
