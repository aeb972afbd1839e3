"""The phone-only actuators and sensors: unavailable on this host, exercised against named fakes.

FakeLibAndroid stands in for libandroid.so (this x86 host has none); the scaling_max_freq tree is a
fake sysfs under tmp_path. Both are fakes for what the host truly lacks (phone APIs), not product.
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

from edgellm.device.governor.adpf import PerformanceHint
from edgellm.device.governor.capabilities import survey
from edgellm.device.governor.cpufreq_caps import CpufreqCaps, with_frequency_caps
from edgellm.device.governor.headroom import ThermalHeadroom
from edgellm.device.governor.ladder import build_ladder
from edgellm.device.telemetry.cpu import CoreCluster
from tests.governor.fakes import FakeLibAndroid, fake_cpufreq


def test_this_host_has_no_libandroid_and_the_adapters_say_so() -> None:
    head, hint = ThermalHeadroom(), PerformanceHint()
    assert not head.available and "libandroid.so" in head.reason and head.read() is None
    assert not hint.available and "libandroid.so" in hint.reason
    assert not hint.open([1, 2], 0.05)


def test_thermal_headroom_reads_the_forecast_and_hides_nan() -> None:
    lib = FakeLibAndroid()
    head = ThermalHeadroom(lib, forecast_s=30)
    assert head.available and head.read() == 0.42 and head.status() == 2
    assert lib.AThermal_getThermalHeadroom.restype is ctypes.c_float
    assert ("AThermal_getThermalHeadroom", (0x1234, 30)) in lib.calls
    lib.headroom = math.nan  # called too often, or unsupported: NaN
    assert head.read() is None


def test_thermal_headroom_needs_api_31() -> None:
    head = ThermalHeadroom(FakeLibAndroid(api=30))
    assert not head.available and "API 31" in head.reason


def test_performance_hint_session_reports_steps_and_sets_the_paced_target() -> None:
    lib = FakeLibAndroid()
    hint = PerformanceHint(lib)
    assert hint.available and hint.open([101, 102, 103], 0.05)
    _, args = next(c for c in lib.calls if c[0] == "APerformanceHint_createSession")
    assert list(args[1][:3]) == [101, 102, 103] and args[2] == 3 and args[3] == 50_000_000
    hint.target(0.0502)  # under 5% change: no call
    hint.target(0.1)
    hint.report(0.04)
    updates = [a for n, a in lib.calls if n == "APerformanceHint_updateTargetWorkDuration"]
    assert updates == [(0xBEEF, 100_000_000)]
    assert ("APerformanceHint_reportActualWorkDuration", (0xBEEF, 40_000_000)) in lib.calls
    hint.close()
    assert not hint.live and lib.calls[-1][0] == "APerformanceHint_closeSession"


def test_performance_hint_is_unavailable_before_api_33_or_when_sessions_are_refused() -> None:
    assert "API 33" in PerformanceHint(FakeLibAndroid(api=31)).reason
    refused = PerformanceHint(FakeLibAndroid(session=0))
    assert refused.available and not refused.open([1], 0.05) and "NULL" in refused.reason


def denied(path: Path, text: str) -> None:
    """What an unrooted app gets for a write to scaling_max_freq (file modes do not stop root here)."""
    raise PermissionError(13, "Permission denied", str(path))


def test_scaling_max_freq_caps_the_decode_domain_and_restores_it(tmp_path: Path) -> None:
    fake_cpufreq(tmp_path)
    caps = CpufreqCaps(tmp_path)
    assert caps.available and set(caps.domains) == {(0, 1), (2, 3)}
    caps.cap((2, 3), 0.7)
    big = tmp_path / "sys/devices/system/cpu/cpu2/cpufreq/scaling_max_freq"
    little = tmp_path / "sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq"
    assert big.read_text().strip() == "2100000" and little.read_text().strip() == "2000000"
    caps.restore()
    assert big.read_text().strip() == "3000000"


def test_scaling_max_freq_unwritable_or_absent_means_unavailable(tmp_path: Path) -> None:
    fake_cpufreq(tmp_path / "phone")
    unrooted = CpufreqCaps(tmp_path / "phone", write=denied)
    assert not unrooted.available and "not writable" in unrooted.reason
    assert not CpufreqCaps(tmp_path / "empty").available
    assert not CpufreqCaps(Path("/")).available  # this host: never touched off Android


def test_a_rooted_phone_gets_capped_variants_of_each_rung() -> None:
    ladder = build_ladder(
        [CoreCluster((0, 1), 300, 2000000), CoreCluster((2, 3, 4, 5), 1024, 3000000)], range(6), 4
    )
    capped = with_frequency_caps(ladder)
    assert len(capped) == 2 * len(ladder)
    assert [r.rung for r in capped] == list(range(len(capped)))
    assert capped[1].freq_cap == 0.7 and capped[1].cpus == ladder[0].cpus


def test_status_survey_lists_every_actuator_and_sensor_with_a_reason() -> None:
    caps = CpufreqCaps(Path("/"))
    found = {c.name: c for c in survey(None, [], (0, 1), caps, PerformanceHint(), ThermalHeadroom())}
    assert found["affinity"].live and found["pacing"].live
    assert not found["scaling_max_freq"].live and "Android" in found["scaling_max_freq"].detail
    assert not found["adpf_performance_hint"].live and not found["athermal_headroom"].live
    assert not found["skin"].live and "falls back" in found["skin_trip_points"].detail
    assert {c.kind for c in found.values()} == {"actuator", "sensor"}
