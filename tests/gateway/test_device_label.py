"""`--device NAME`: every metric a gateway exports carries `device="NAME"` (a fleet's phones apart)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from edgellm.common.errors import InvalidArgument
from edgellm.gateway.config import GatewayConfig
from tests.gateway.conftest import StartDaemon, StartGateway, keyed_http, sdk, telemetry_read


async def test_every_sample_carries_the_gateways_device_label(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    gw = await start_gw(await start_daemon(virtual_phone="sd8gen3"), device="phone-a")
    async with sdk(gw) as client:
        await client.chat.completions.create(
            model="", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
        )
    await telemetry_read(gw)
    async with keyed_http(gw) as http:
        text = (await http.get("/metrics")).text
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert len(samples) > 50
    assert {s.labels.get("device") for s in samples} == {"phone-a"}
    zones = [s for s in samples if s.name == "edgellm_device_temperature_celsius"]
    assert zones and all("sensor" in s.labels for s in zones)  # their own labels are kept


def test_a_device_label_prometheus_cannot_take_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="--device 'phone 1'"):
        GatewayConfig(api_key="k", device="phone 1").validate()
