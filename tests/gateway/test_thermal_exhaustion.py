"""End to end: a phone in a hot room runs out of thermal headroom; the daemon says so and refuses,
and the gateway answers 503 with Retry-After.

The daemon is the real one (servicer, scheduler, governor) with the FakeEngine (tests/fakes: no
model) on the virtual phone (edgellm.sim): sd8gen3 in a case in a 38 °C room, its clock 50x real
time. The idle phone alone holds the skin above its 39 °C comfort limit, so no decode rate is
sustainable under it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from edgellm.common.errors import REFUSAL_KEY, RETRY_AFTER_KEY, THERMAL_REFUSAL
from edgellm.device.rpc.server import RunningDaemon
from edgellm.gateway.config import Shedding
from edgellm.sim.profile import warm_case
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.gateway.conftest import StartDaemon, StartGateway, keyed_http, sdk, telemetry_read
from tests.rpc.conftest import channel_to

HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]
EXHAUSTED = device_pb2.CAPACITY_STATE_THERMAL_HEADROOM_EXHAUSTED


@pytest.fixture
def hot_room(tmp_path: Path) -> str:
    """sd8gen3 in a case (docs/governor.md's warm-case copy) in a 38 °C room, as a profile file."""
    data = warm_case()
    data["name"], data["ambient_c"] = "sd8gen3-case-hot-room", 38.0
    path = tmp_path / "hot-room.json"
    path.write_text(json.dumps(data))
    return str(path)


async def exhausted_status(
    stub: device_pb2_grpc.DeviceDaemonAsyncStub, within_s: float = 60.0
) -> device_pb2.DaemonStatus:
    """Poll GetStatus until the governor reports the exhausted state."""
    for _ in range(int(within_s / 0.1)):
        st: device_pb2.DaemonStatus = await stub.GetStatus(device_pb2.GetStatusRequest())
        if st.governor.capacity_state == EXHAUSTED:
            return st
        await asyncio.sleep(0.1)
    raise AssertionError(f"the hot room never exhausted the headroom: {st.governor}")


async def start_hot(start_daemon: StartDaemon, hot_room: str) -> RunningDaemon:
    return await start_daemon(virtual_phone=hot_room, virtual_phone_time_scale=50.0, governor_period_s=0.05)


async def test_a_hot_room_makes_the_daemon_report_exhausted_and_refuse_with_a_retry_hint(
    start_daemon: StartDaemon, hot_room: str
) -> None:
    daemon = await start_hot(start_daemon, hot_room)
    async with channel_to(daemon) as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        st = await exhausted_status(stub)
        g = st.governor
        assert g.refusing_generations and g.capacity_basis == "idle over the limit"
        assert g.capacity_tokens_per_second < g.capacity_floor_tokens_per_second == 1.0
        assert g.capacity_retry_after_s > 0
        served = st.requests_served
        call = stub.Generate(device_pb2.GenerateRequest(prompt="Hi", max_new_tokens=4))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
    err = caught.value
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "thermal headroom exhausted" in str(err.details()) and "39.0 °C comfort limit" in str(
        err.details()
    )
    assert "--thermal-policy throughput" in str(err.details())  # what to change, said
    trailers = dict(await call.trailing_metadata() or ())
    assert trailers[REFUSAL_KEY] == THERMAL_REFUSAL
    assert int(trailers[RETRY_AFTER_KEY]) == g.capacity_retry_after_s
    assert daemon.core.scheduler.requests_served == served  # refused before the engine saw it


async def test_the_gateway_answers_503_with_the_daemons_retry_after_and_exports_the_capacity(
    start_daemon: StartDaemon, start_gw: StartGateway, hot_room: str
) -> None:
    daemon = await start_hot(start_daemon, hot_room)
    gw = await start_gw(daemon, shedding=Shedding(hot_retry_after_s=7))
    async with channel_to(daemon) as channel:
        retry = (
            await exhausted_status(device_pb2_grpc.DeviceDaemonStub(channel))
        ).governor.capacity_retry_after_s
    await telemetry_read(gw)
    await asyncio.sleep(0.5)  # the gateway's cached sample (every 0.2 s) catches up
    async with sdk(gw) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(model="", messages=HI, max_tokens=4)
    err = caught.value
    assert err.status_code == 503
    assert err.response.headers["retry-after"] == str(retry)  # the daemon's hint, not the hot default
    assert err.body["code"] == "thermal_headroom_exhausted"  # type: ignore[index]
    assert err.body["type"] == "service_unavailable"  # type: ignore[index]
    assert "thermal headroom exhausted" in err.message
    async with keyed_http(gw) as http:
        health = await http.get("/health")
        metrics = (await http.get("/metrics")).text
    assert health.status_code == 503 and health.headers["retry-after"] == str(retry)
    assert "edgellm_governor_thermal_headroom_exhausted 1.0" in metrics
    assert "edgellm_governor_capacity_tokens_per_second 0.0" in metrics
    assert "edgellm_governor_capacity_floor_tokens_per_second 1.0" in metrics


async def test_without_shedding_the_daemons_own_refusal_still_reaches_the_client_as_503(
    start_daemon: StartDaemon, start_gw: StartGateway, hot_room: str
) -> None:
    daemon = await start_hot(start_daemon, hot_room)
    gw = await start_gw(daemon, shedding=Shedding(when_hot=False))
    async with channel_to(daemon) as channel:
        retry = (
            await exhausted_status(device_pb2_grpc.DeviceDaemonStub(channel))
        ).governor.capacity_retry_after_s
    async with sdk(gw) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(model="", messages=HI, max_tokens=4)
    assert caught.value.status_code == 503
    assert caught.value.response.headers["retry-after"] == str(retry)
    assert caught.value.body["code"] == "thermal_headroom_exhausted"  # type: ignore[index]


async def test_a_daemon_in_a_normal_room_reports_its_capacity_and_serves(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    daemon = await start_daemon(
        virtual_phone="sd8gen3", virtual_phone_time_scale=50.0, governor_period_s=0.05
    )
    gw = await start_gw(daemon)
    async with sdk(gw) as client:
        answer = await client.chat.completions.create(model="", messages=HI, max_tokens=2)
    assert answer.choices[0].message.content
    async with channel_to(daemon) as channel:
        g = (
            await device_pb2_grpc.DeviceDaemonStub(channel).GetStatus(device_pb2.GetStatusRequest())
        ).governor
    assert g.capacity_state != EXHAUSTED and not g.refusing_generations
