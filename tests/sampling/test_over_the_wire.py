"""The daemon reports the loaded model's sampling defaults; `edgellm generate` and the gateway send them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
import pytest

from edgellm.cli import main
from edgellm.client.client import DaemonClient
from edgellm.device.rpc.server import RunningDaemon
from edgellm.gateway.server import RunningGateway
from edgellm.gateway.upstream import Stream
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.gateway.conftest import keyed_http
from tests.sampling.conftest import TINY

StartDaemon = Callable[..., Awaitable[RunningDaemon]]
StartGateway = Callable[..., Awaitable[RunningGateway]]


def _tiny(s: Any) -> tuple[float, ...]:
    return (s.temperature, s.top_k, s.top_p, s.repetition_penalty, s.frequency_penalty)


EXPECTED = pytest.approx((TINY.temperature, TINY.top_k, TINY.top_p, TINY.repetition_penalty, 0.0))


async def test_get_status_and_list_models_report_the_models_sampling_defaults(
    start_daemon: StartDaemon,
) -> None:
    daemon = await start_daemon()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        status = await stub.GetStatus(device_pb2.GetStatusRequest())
        models = await stub.ListModels(device_pb2.ListModelsRequest())
    assert status.model.sampling_defaults.origin == "generation_config"
    assert _tiny(status.model.sampling_defaults) == EXPECTED
    assert [m.sampling_defaults.top_k for m in models.models] == [20]


async def test_edgellm_generate_without_sampling_flags_sends_the_models_defaults(
    start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = await start_daemon()
    sent: list[device_pb2.GenerateRequest] = []
    original = DaemonClient.stream

    def stream(self: DaemonClient, request: device_pb2.GenerateRequest) -> Iterator[Any]:
        sent.append(request)
        return original(self, request)

    monkeypatch.setattr(DaemonClient, "stream", stream)
    target = ["--target", f"127.0.0.1:{daemon.port}", "--insecure-loopback", "--quiet-stats"]
    code = await asyncio.to_thread(main, ["--log-level", "WARNING", "generate", *target, "Hi"])
    assert code == 0 and _tiny(sent[0].sampling) == EXPECTED
    flags = ["--temperature", "0", "--top-p", "1"]
    code = await asyncio.to_thread(main, ["--log-level", "WARNING", "generate", *target, *flags, "Hi"])
    assert code == 0 and (sent[1].sampling.temperature, sent[1].sampling.top_p) == (0.0, 1.0)
    assert sent[1].sampling.top_k == 20  # the flags not given stay the model's


async def test_an_openai_request_without_temperature_gets_the_models_default(
    start_daemon: StartDaemon, start_gw: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = await start_gw(await start_daemon())
    sent: list[device_pb2.GenerateRequest] = []
    original = Stream.open

    async def open_stream(daemon: Any, request: device_pb2.GenerateRequest) -> Any:
        sent.append(request)
        return await original(daemon, request)

    monkeypatch.setattr(Stream, "open", open_stream)  # the gateway's one way to the daemon
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    async with keyed_http(gateway) as http:
        plain = await http.post("/v1/chat/completions", json=body)
        given = await http.post("/v1/chat/completions", json={**body, "temperature": 1.5, "top_k": 0})
    assert plain.status_code == 200 and given.status_code == 200, (plain.text, given.text)
    assert _tiny(sent[0].sampling) == EXPECTED
    assert (sent[1].sampling.temperature, sent[1].sampling.top_k) == (1.5, 0)
