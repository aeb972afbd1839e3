"""Readers against checked-in phone layouts and broken trees (never patching open or glob)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from edgellm.device.governor.ladder import build_ladder
from edgellm.device.telemetry.battery import BatteryReader
from edgellm.device.telemetry.cpu import CpuReader
from edgellm.device.telemetry.process import read_meminfo, read_process
from edgellm.device.telemetry.source import TelemetrySource
from edgellm.device.telemetry.thermal import ThermalReader, classify, to_celsius

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs"
SD8G3 = FIXTURES / "sd8gen3"
LOCKED = FIXTURES / "locked-thermal"


def test_thermal_zones_classified_and_in_celsius() -> None:
    reader = ThermalReader(SD8G3)
    snap = reader.read()
    by_name = {z.name: z for z in snap.zones}
    assert by_name["cpu-1-0-usr"].kind == "cpu" and by_name["cpu-1-0-usr"].celsius == pytest.approx(47.8)
    assert by_name["skin-therm"].kind == "skin" and by_name["xo-therm"].kind == "skin"
    assert by_name["battery"].kind == "battery" and by_name["gpuss-0-usr"].kind == "gpu"
    assert by_name["aoss-0-usr"].kind == "soc"
    assert "cpuss-2-usr" not in by_name and reader.skipped == ["thermal_zone10"]  # no temp: skipped
    assert snap.hottest("cpu") == pytest.approx(47.8)
    assert snap.hottest("skin") == pytest.approx(36.4)
    assert reader.skin_trips_c() == [40.5, 44.0]


def test_units_and_classes() -> None:
    assert to_celsius(45300) == 45.3 and to_celsius(453) == 45.3 and to_celsius(45) == 45.0
    assert classify("mtktscpu") == "cpu" and classify("mtktsbattery") == "battery"
    assert classify("quiet-therm") == "skin" and classify("pm8550-tz") == "other"


def test_unreadable_thermal_zones_give_unavailable() -> None:
    reader = ThermalReader(LOCKED)
    assert not reader.available
    assert reader.read().zones == ()
    assert len(reader.skipped) == 3


def test_zone_that_breaks_after_probe_is_left_out(tmp_path: Path) -> None:
    zone = tmp_path / "sys/class/thermal/thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("skin-therm\n")
    (zone / "temp").write_text("35000\n")
    reader = ThermalReader(tmp_path)
    assert reader.read().hottest("skin") == 35.0
    (zone / "temp").unlink()
    (zone / "temp").mkdir()  # reading a directory fails even as root, like an SELinux denial
    assert reader.read().zones == ()


def test_cpu_clusters_from_related_cpus_and_capacity() -> None:
    cpu = CpuReader(SD8G3)
    assert [c.cpus for c in cpu.clusters] == [(0, 1), (2, 3, 4, 5, 6), (7,)]
    assert [c.capacity for c in cpu.clusters] == [280, 850, 1024]
    cores = {c.cpu: c for c in cpu.read()}
    assert cores[7].cur_khz == 3302400 and cores[7].max_khz == 3302400 and cores[3].cluster == 1
    rungs = build_ladder(cpu.clusters, set(range(8)), 4)
    assert rungs[0].cpus == (4, 5, 6, 7)


def test_cpu_fallbacks_without_capacity_or_cur_freq() -> None:
    cpu = CpuReader(LOCKED)
    assert [c.cpus for c in cpu.clusters] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert cpu.clusters[1].capacity == 1024 and cpu.clusters[0].capacity == int(1024 * 2000000 / 2850000)
    assert {c.cpu: c.cur_khz for c in cpu.read()}[7] == 0


def test_cpu_missing_tree(tmp_path: Path) -> None:
    cpu = CpuReader(tmp_path)
    assert not cpu.available and cpu.read() == () and cpu.clusters == ()


def test_memory_and_process() -> None:
    mem = read_meminfo(SD8G3)
    assert mem.total_bytes == 11780000 * 1024 and mem.available_bytes == 4950000 * 1024
    assert read_meminfo(LOCKED).available_bytes == (300000 + 1200000) * 1024  # no MemAvailable: Free+Cached
    proc = read_process(SD8G3)
    assert proc.rss_bytes == 640000 * 1024 and proc.rss_peak_bytes == 812000 * 1024
    assert proc.cpu_seconds == pytest.approx((250 + 50 + 700 + 100) / 100, rel=0.5)  # CLK_TCK is 100 on Linux
    empty = read_process(Path("/nonexistent"))
    assert empty.rss_bytes == 0 and empty.cpu_seconds == 0.0


def test_source_prefers_skin_then_battery() -> None:
    r = TelemetrySource(SD8G3, SD8G3).read()
    assert r.skin_c == pytest.approx(36.4) and r.control_c == pytest.approx(36.4)
    assert r.soc_c == pytest.approx(47.8) and r.battery_c == pytest.approx(33.0)
    locked = TelemetrySource(LOCKED, LOCKED).read()
    assert locked.control_c is None and locked.zones == ()


async def test_battery_reader_timeout_cache_and_parse(tmp_path: Path) -> None:
    ok = tmp_path / "termux-battery-status"
    # /bin/sh, like Termux:API's own script (and runnable from the emulated ARM Python, which
    # cannot exec another ARM binary such as sys.executable).
    ok.write_text('#!/bin/sh\necho \'{"percentage": 80, "temperature": 31.5}\'\n')
    ok.chmod(0o755)
    reader = BatteryReader(command=(str(ok),), timeout_s=5.0)
    assert reader.available and reader.cached() is None
    await reader.refresh()
    assert reader.cached() == 31.5
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    slow = BatteryReader(command=(str(hang),), timeout_s=0.3)
    slow.celsius = 30.0
    await asyncio.wait_for(slow.refresh(), 5.0)  # killed at the timeout, cached value kept
    assert slow.cached() == 30.0
    missing = BatteryReader(command=("no-such-termux-command",))
    assert not missing.available and missing.cached() is None
