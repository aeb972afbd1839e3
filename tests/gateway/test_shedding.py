"""A hot device sheds completion requests with 503 + Retry-After (a fleet's router goes elsewhere).

The daemon runs the fake engine on the virtual phone (edgellm.sim) with its real governor; a
setpoint below the room's temperature makes the governor run out of rungs and pace the coolest one.
"""

from __future__ import annotations

import asyncio

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from edgellm.gateway.config import Shedding
from edgellm.gateway.server import RunningGateway
from edgellm.gateway.shedding import busy_reason, hot_reason
from edgellm.v1 import device_pb2
from tests.gateway.conftest import StartDaemon, StartGateway, keyed_http, sdk

HOT = {"virtual_phone": "sd8gen3", "setpoint_c": 20.0, "virtual_phone_time_scale": 50.0}
HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]


async def _until_hot(gw: RunningGateway, within_s: float = 30.0) -> dict[str, object]:
    """Poll /health until the gateway reports the device hot; return the error body."""
    async with keyed_http(gw) as http:
        for _ in range(int(within_s / 0.1)):
            r = await http.get("/health")
            body = r.json()
            if "hot" in str(body):
                return {"status": r.status_code, "retry_after": r.headers.get("retry-after"), **body}
            await asyncio.sleep(0.1)
    raise AssertionError("the virtual phone's governor never ran out of rungs")


async def test_a_hot_device_answers_503_with_retry_after_before_any_token(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    daemon = await start_daemon(**HOT, governor_period_s=0.05)
    gw = await start_gw(daemon, shedding=Shedding(hot_retry_after_s=7))
    health = await _until_hot(gw)
    assert health["status"] == 503 and health["retry_after"] == "7"
    served = daemon.core.scheduler.requests_served
    async with sdk(gw) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(model="", messages=HI, max_tokens=4)
    err = caught.value
    assert err.status_code == 503
    assert err.response.headers["retry-after"] == "7"
    assert err.body["code"] == "device_hot"  # type: ignore[index]
    assert "no cooler rung left" in err.message and "retry after 7 s" in err.message
    assert daemon.core.scheduler.requests_served == served  # refused before the device saw it
    async with keyed_http(gw) as http:
        metrics = (await http.get("/metrics")).text
    assert "edgellm_gateway_shed_requests_total 1.0" in metrics


async def test_with_no_shed_when_hot_the_hot_device_still_answers_and_health_says_why(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    gw = await start_gw(await start_daemon(**HOT, governor_period_s=0.05), shedding=Shedding(when_hot=False))
    async with keyed_http(gw) as http:
        for _ in range(300):
            body = (await http.get("/health")).json()
            if "reason" in body:
                break
            await asyncio.sleep(0.1)
    assert body["status"] == "ok" and "no cooler rung left" in str(body["reason"])
    async with sdk(gw) as client:
        answer = await client.chat.completions.create(model="", messages=HI, max_tokens=2)
    assert answer.choices[0].message.content


async def test_a_cool_device_is_not_shed(start_daemon: StartDaemon, start_gw: StartGateway) -> None:
    gw = await start_gw(await start_daemon(virtual_phone="sd8gen3"))
    async with keyed_http(gw) as http:
        r = await http.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    async with sdk(gw) as client:
        answer = await client.chat.completions.create(model="", messages=HI, max_tokens=2)
    assert answer.choices[0].message.content


def test_hot_reasons_come_from_the_duty_or_the_os_forecast_and_not_from_other_policies() -> None:
    paced = device_pb2.TelemetrySample(governor=device_pb2.GovernorState(policy="thermal", duty=0.5))
    assert hot_reason(paced) is not None
    pinned = device_pb2.TelemetrySample(governor=device_pb2.GovernorState(policy="pinned", duty=0.5))
    assert hot_reason(pinned) is None  # the operator pinned it: not the thermals' doing
    older = device_pb2.TelemetrySample(governor=device_pb2.GovernorState(policy="thermal"))
    assert hot_reason(older) is None  # a daemon without `duty` is never taken for hot
    severe = device_pb2.TelemetrySample(governor=device_pb2.GovernorState(thermal_headroom=1.02))
    assert "severe" in str(hot_reason(severe))
    assert hot_reason(None) is None


def test_a_full_queue_is_busy() -> None:
    assert busy_reason(device_pb2.DaemonStatus(queue_depth=4, queue_capacity=4)) is not None
    assert busy_reason(device_pb2.DaemonStatus(queue_depth=3, queue_capacity=4)) is None
    assert busy_reason(device_pb2.DaemonStatus()) is None
