"""Request limits (M4, L2, L3): body size, requests in flight, max_tokens, message size, integer
ranges and nesting; every refusal in OpenAI's error shape, and oversized requests never a 429."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from edgellm.device.rpc import server as daemon_server
from edgellm.gateway.config import Limits
from tests.gateway.conftest import KEY, StartDaemon, StartGateway, keyed_http, sdk

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the capital of France?"}]


def _openai_error(body: dict[str, Any]) -> dict[str, Any]:
    """The error object, checked to have OpenAI's four fields."""
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return dict(err)


async def test_a_body_over_the_cap_is_a_413_declared_or_streamed(
    start_gw: StartGateway, fake_daemon: Any
) -> None:
    gw = await start_gw(fake_daemon, limits=Limits(max_body_bytes=64 * 1024))
    big = b'{"model": "", "messages": [{"role": "user", "content": "' + b"a" * 100_000 + b'"}]}'

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked transfer encoding
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    async with keyed_http(gw) as http:
        for content in (big, chunks()):
            refused = await http.post(
                "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
            )
            assert refused.status_code == 413
            err = _openai_error(refused.json())
            assert err["code"] == "request_too_large" and "--max-body-bytes" in err["message"]
        ok = await http.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 2})
        assert ok.status_code == 200


async def test_requests_past_max_concurrent_are_a_429_with_retry_after(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    daemon = await start_daemon(endless=True, step_s=0.01)
    gw = await start_gw(daemon, limits=Limits(max_concurrent=1))
    async with sdk(gw) as c:
        stream = await c.chat.completions.create(
            model="fake-model", messages=QUESTION, max_tokens=2000, stream=True
        )
        async for _ in stream:  # the first request is in flight, streaming
            break
        async with keyed_http(gw) as http:
            busy = await http.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 2})
        assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
        assert "--max-concurrent" in _openai_error(busy.json())["message"]
        await stream.close()
        for _ in range(500):  # poll: the gateway counts the stream out once it has closed
            answer = None
            try:
                answer = await c.chat.completions.create(model="fake-model", messages=QUESTION, max_tokens=2)
                break
            except openai.RateLimitError:
                await asyncio.sleep(0.01)
        assert answer is not None and answer.usage is not None and answer.usage.completion_tokens == 2


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        # The fake daemon's cap (2048) is below the gateway's (4096): the lower one is named, in the
        # API's words (a daemon refusal would have spoken of its own max_new_tokens).
        ({"max_tokens": 4097}, "max_tokens", "'max_tokens' must be at most 2048"),
        ({"max_completion_tokens": 2**40}, "max_completion_tokens", "at most 2048 (the device daemon's"),
        ({"max_tokens": 2049}, "max_tokens", "--max-new-tokens-cap"),
        ({"top_k": 2**32}, "top_k", "top_k"),
        ({"seed": 2**64}, "seed", "seed"),
        ({"logit_bias": {str(2**32): 1}}, "logit_bias", "token id"),
        ({"logit_bias": {"1" * 5000: 1}}, "logit_bias", "token ids"),
        ({"logit_bias": {str(i): 1 for i in range(301)}}, "logit_bias", "at most 300"),
    ],
)
async def test_out_of_range_numbers_are_a_400_naming_the_field(
    client: openai.AsyncOpenAI, extra: dict[str, Any], param: str, words: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="fake-model", messages=QUESTION, extra_body=extra)
    assert caught.value.param == param and words in caught.value.message


async def test_a_message_or_prompt_over_the_character_cap_is_a_400(
    start_gw: StartGateway, fake_daemon: Any
) -> None:
    gw = await start_gw(fake_daemon, limits=Limits(max_message_chars=1000))
    async with sdk(gw) as c:
        with pytest.raises(openai.BadRequestError) as caught:
            await c.chat.completions.create(
                model="fake-model", messages=[*QUESTION, {"role": "user", "content": "x" * 1001}]
            )
        assert caught.value.param == "messages[1].content" and "1000" in caught.value.message
        with pytest.raises(openai.BadRequestError) as caught:
            await c.completions.create(model="fake-model", prompt="x" * 1001)
        assert caught.value.param == "prompt"


async def test_a_deeply_nested_body_is_a_400_in_openai_shape_not_a_500(
    start_gw: StartGateway, fake_daemon: Any
) -> None:
    gw = await start_gw(fake_daemon)
    deep = '{"model": "", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}"
    huge_int = '{"messages": [], "seed": ' + "9" * 5000 + "}"
    async with keyed_http(gw) as http:
        for text, words in ((deep, "nested too deeply"), (huge_int, "not valid JSON")):
            answer = await http.post(
                "/v1/chat/completions", content=text, headers={"content-type": "application/json"}
            )
            assert answer.status_code == 400, answer.text[:200]
            assert words in _openai_error(answer.json())["message"]


async def test_a_request_over_the_daemons_message_limit_is_a_413_not_a_429(
    start_daemon: StartDaemon, start_gw: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Why patch: a daemon with a 64 KiB receive limit lets the test send 100 KB, not over 8 MiB.
    monkeypatch.setattr(daemon_server, "MAX_MESSAGE_BYTES", 64 * 1024)
    daemon = await start_daemon()
    gw = await start_gw(daemon)
    # The SDK's default retries: a 429 would be sent three times; a 413 is sent once.
    async with openai.AsyncOpenAI(base_url=gw.url, api_key=KEY) as c:
        with pytest.raises(openai.APIStatusError) as caught:
            await c.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "x" * 100_000}]
            )
    assert caught.value.status_code == 413
    assert "larger than the device daemon accepts" in caught.value.message
