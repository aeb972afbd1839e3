"""Refusals in OpenAI's error shape: unsupported fields name themselves, gRPC statuses map to HTTP."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from edgellm.common.tls import ServerTls
from edgellm.gateway.config import GatewayConfig
from tests.gateway.conftest import StartDaemon, StartGateway, keyed_http, sdk

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"),
        ({"echo": True}, "echo"),  # a completions option (chat has logprobs)
        ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),  # the legacy form; tools work
        ({"audio": {"voice": "alloy"}}, "audio"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
async def test_an_unsupported_field_is_a_400_naming_it(
    client: openai.AsyncOpenAI, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="fake-model", messages=QUESTION, extra_body=extra)
    err = caught.value
    assert err.status_code == 400 and err.param == param and param in err.message


async def test_a_message_with_an_image_part_is_refused_not_dropped(client: openai.AsyncOpenAI) -> None:
    content: list[Any] = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": "x"}},
    ]
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": content}]
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="fake-model", messages=messages)
    assert caught.value.param == "messages[0].content[1]"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"temperature": 3}, "temperature"),
        ({"logit_bias": {"abc": 1}}, "logit_bias"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"seed": -1}, "seed"),
    ],
)
async def test_bad_values_are_a_400_naming_the_field(
    client: openai.AsyncOpenAI, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="fake-model", messages=QUESTION, extra_body=extra)
    assert caught.value.param == param


async def test_the_daemons_invalid_argument_is_a_400(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="cap"):
        await client.chat.completions.create(model="fake-model", messages=QUESTION, max_tokens=10**6)
    with pytest.raises(
        openai.BadRequestError, match="logit_bias"
    ):  # checked on the device: id past the vocab
        await client.chat.completions.create(model="fake-model", messages=QUESTION, logit_bias={"999999": 5})


async def test_an_unknown_model_is_a_404(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await client.chat.completions.create(model="gpt-4o", messages=QUESTION)
    assert caught.value.code == "model_not_found"


async def test_response_format_reaches_the_device_as_a_constraint(client: openai.AsyncOpenAI) -> None:
    # The fake artifact carries no tokenizer.json, so the device cannot enforce a constraint and
    # refuses (FAILED_PRECONDITION): never unconstrained text. tests/gateway/test_constrained.py
    # has the answered case.
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    formats: list[Any] = [
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
    ]
    for fmt in formats:
        with pytest.raises(openai.BadRequestError, match="constrain") as caught:
            await client.chat.completions.create(model="fake-model", messages=QUESTION, response_format=fmt)
        assert caught.value.param == "response_format"
        with pytest.raises(openai.BadRequestError):  # streamed: refused before any text is sent
            await client.chat.completions.create(
                model="fake-model", messages=QUESTION, response_format=fmt, stream=True
            )


async def test_no_model_loaded_is_a_503_and_health_says_so(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    daemon = await start_daemon(model=None)
    gw = await start_gw(daemon)
    async with sdk(gw) as c:
        with pytest.raises(openai.InternalServerError) as caught:
            await c.chat.completions.create(model="fake-model", messages=QUESTION)
    assert caught.value.status_code == 503
    async with httpx.AsyncClient() as http:
        health = await http.get(f"http://127.0.0.1:{gw.port}/health")
    assert health.status_code == 503 and "no model" in health.json()["error"]["message"]


async def test_health_is_200_with_a_model(gateway: Any) -> None:
    async with httpx.AsyncClient() as http:
        health = await http.get(f"http://127.0.0.1:{gateway.port}/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"


async def test_the_daemons_token_is_sent_and_a_wrong_one_is_a_502_that_blames_the_gateway(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    daemon = await start_daemon(auth_token="device-secret")
    good = await start_gw(daemon, daemon_token="device-secret")
    bad = await start_gw(daemon, daemon_token="wrong")
    async with sdk(good) as c:
        answer = await c.chat.completions.create(model="fake-model", messages=QUESTION, temperature=0)
        assert answer.choices[0].message.content
    async with sdk(bad) as c:
        # Not a 401: the caller's key was right; the gateway's operator must fix its daemon token.
        with pytest.raises(openai.InternalServerError) as caught:
            await c.chat.completions.create(model="fake-model", messages=QUESTION)
    assert caught.value.status_code == 502 and "gateway's token" in caught.value.message
    assert "token" not in caught.value.message.split("(request id")[1]  # no file locations passed on


async def test_a_full_device_queue_is_a_429(start_daemon: StartDaemon, start_gw: StartGateway) -> None:
    daemon = await start_daemon(endless=True, step_s=0.01, queue_size=1)
    gw = await start_gw(daemon)
    scheduler = daemon.core.scheduler

    async def until(condition: Callable[[], bool]) -> None:
        for _ in range(300):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the daemon never got there")

    async with sdk(gw) as c:

        def ask() -> asyncio.Task[Any]:
            return asyncio.create_task(
                c.chat.completions.create(model="fake-model", messages=QUESTION, max_tokens=500)
            )

        running = [ask()]
        await until(lambda: scheduler.phase is not None)  # one runs
        running.append(ask())
        await until(lambda: scheduler.worker.depth == 1)  # one waits: the queue is full
        with pytest.raises(openai.RateLimitError) as caught:
            await c.chat.completions.create(model="fake-model", messages=QUESTION, max_tokens=5)
        assert "queue" in caught.value.message
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


def test_the_gateway_refuses_to_serve_without_a_key_or_off_loopback_without_tls(tmp_path: Path) -> None:
    tls = ServerTls(tmp_path / "cert.pem", tmp_path / "key.pem")
    with pytest.raises(ValueError, match="without an API key"):
        GatewayConfig().validate()  # loopback too
    with pytest.raises(ValueError, match=r"--no-api-key is for 127\.0\.0\.1 only"):
        GatewayConfig(host="0.0.0.0", no_api_key=True, tls=tls).validate()
    with pytest.raises(ValueError, match="--tls-cert and --tls-key, or --tls-self-signed"):
        GatewayConfig(host="0.0.0.0", api_key="k").validate()
    GatewayConfig(no_api_key=True).validate()  # the explicit opt-out, on loopback
    GatewayConfig(host="0.0.0.0", api_key="k", tls=tls).validate()


async def test_an_unreachable_daemon_is_a_503_everywhere(start_gw: StartGateway) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    gw = await start_gw(None, target=f"127.0.0.1:{dead}")
    async with sdk(gw) as c:
        with pytest.raises(openai.InternalServerError) as caught:
            await c.chat.completions.create(model="", messages=QUESTION)
    message = caught.value.message
    assert caught.value.status_code == 503 and "daemon is not reachable" in message
    # L9: the gRPC transport's text (addresses, "failed to connect") stays in the gateway's log.
    assert str(dead) not in message and "ipv4" not in message and "connect" not in message
    async with keyed_http(gw) as http:
        assert (await http.get(f"http://127.0.0.1:{gw.port}/health")).status_code == 503
        metrics = (await http.get(f"http://127.0.0.1:{gw.port}/metrics")).text
    assert "edgellm_device_up 0.0" in metrics
