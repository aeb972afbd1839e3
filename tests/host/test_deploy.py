"""Deploy end to end against a real daemon: push, load, generate, device-measured numbers."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from device_daemon.config import DaemonConfig
from device_daemon.server import start_server
from host_service.deploy import deploy


async def test_deploy_reports_device_numbers(default_artifact: Path, tmp_path: Path) -> None:
    d = await start_server(DaemonConfig(port=0, data_dir=tmp_path / "data", disk_reserve_bytes=0))
    events: list[tuple[float, str]] = []
    try:
        result = await asyncio.to_thread(
            deploy, default_artifact, f"127.0.0.1:{d.port}", lambda f, m: events.append((f, m)), "Hi", 8
        )
    finally:
        await d.stop(0)
    assert result["load_ms"] > 0 and result["warmup_ms"] > 0
    assert result["ttft_ms"] > 0 and result["decode_tokens_per_second"] > 0
    assert result["bytes_sent"] == result["bytes_total"]
    fractions = [f for f, _ in events]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(fractions))
    assert fractions[-1] == 1.0
    assert any("MB/s" in m and "ETA" in m for _, m in events)
