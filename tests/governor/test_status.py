"""`edgellm status` says which governor actuators and sensors are live (a real daemon, virtual phone)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from edgellm.cli import main
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.platforms import choose_platform
from tests.polling import apoll
from tests.trust import trust_server


@pytest.fixture
async def virtual_daemon(tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    config = DaemonConfig.of(port=0, data_dir=tmp_path, virtual_phone="sd8gen3", governor_period_s=0.05)
    running = await start_server(config, platform=choose_platform(config))
    trust_server(running.security, running.port, "virtual-phone")  # as a deploy makes a phone known
    yield running
    await running.stop(0)


async def test_status_lists_live_and_unavailable_governor_inputs_and_outputs(
    virtual_daemon: RunningDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    await apoll(lambda: virtual_daemon.core.governor.last_reading is not None, "a governor reading")
    loop = asyncio.get_running_loop()
    target = f"127.0.0.1:{virtual_daemon.port}"
    assert await loop.run_in_executor(None, main, ["status", "--target", target]) == 0
    out = capsys.readouterr().out
    assert "governor thermal  comfort 39.0 °C" in out
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("  ")}
    assert "live" in lines["skin"] and "live" in lines["cpu_zone"] and "live" in lines["affinity"]
    # this host has no libandroid.so and the virtual tree has no scaling_max_freq: said, with why
    assert "off" in lines["athermal_headroom"] and "libandroid.so" in lines["athermal_headroom"]
    assert "off" in lines["adpf_performance_hint"] and "off" in lines["scaling_max_freq"]
    assert "first 40.5 °C" in lines["skin_trip_points"]
    assert await loop.run_in_executor(None, main, ["status", "--target", target, "--json"]) == 0
    assert '"capabilities"' in capsys.readouterr().out
