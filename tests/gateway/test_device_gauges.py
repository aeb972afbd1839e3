"""Device gauges when the device cannot tell (issue 32, item 5): what was not read is absent, and a
governor with no temperature to read accrues no throttled time, over the wire."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from edgellm.gateway.device import DeviceCollector, DeviceWatch
from edgellm.v1 import device_pb2
from tests.gateway.conftest import StartDaemon, StartGateway, keyed_http, telemetry_read

LOCKED = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "locked-thermal"


async def test_with_no_temperature_to_read_throttled_seconds_stay_zero(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    # A phone that hides its thermal zones (the fixture tree): the governor steps every 0.1 s.
    daemon = await start_daemon(sysfs_root=LOCKED, governor_period_s=0.1)
    gw = await start_gw(daemon)
    await telemetry_read(gw)
    await asyncio.sleep(1.5)  # fifteen governor periods: uptime grows, throttled time must not
    async with keyed_http(gw) as http:
        text = (await http.get("/metrics")).text
    values = {
        s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels
    }
    assert values["edgellm_daemon_uptime_seconds"] > 1.0
    assert values["edgellm_governor_throttled_seconds_total"] == 0.0
    assert values["edgellm_governor_level"] == 0.0


def test_unreadable_clocks_are_absent_not_zero_hertz() -> None:
    watch = DeviceWatch(daemon=None, period_s=1.0)  # type: ignore[arg-type]  # never started: no I/O
    watch.sample = device_pb2.TelemetrySample(
        cores=[
            device_pb2.CoreFrequency(cpu=0, cluster=0, cur_khz=0, max_khz=0),  # cpufreq hidden
            device_pb2.CoreFrequency(cpu=1, cluster=1, cur_khz=1_800_000, max_khz=2_400_000),
        ]
    )
    watch.updated = time.monotonic()
    families = {f.name: f for f in DeviceCollector(watch).collect()}
    clocks = families["edgellm_device_cluster_frequency_hertz"].samples
    assert [(s.labels["cluster"], s.value) for s in clocks] == [("1", 1.8e9)]
    tops = families["edgellm_device_cluster_max_frequency_hertz"].samples
    assert [(s.labels["cluster"], s.value) for s in tops] == [("1", 2.4e9)]
