"""The virtual phone matches the published curves, its firmware holds the skin, the governor its bars."""

from __future__ import annotations

import json
from typing import Any

import pytest

from edgellm.device.governor.actuation import Actuation
from edgellm.sim.plant import ThermalPlant
from edgellm.sim.profile import (
    PROFILE_DIR,
    list_profiles,
    load_profile,
    profile_from_dict,
    warm_case,
)
from edgellm.sim.simulate import SimResult, simulate

PUBLISHED = {1: 12.4, 5: 9.1, 10: 6.2, 15: 4.1, 30: 3.8}  # Snapdragon 8 Gen 3 CPU decode, DESIGN.md


def tokens_at(result: SimResult, minute: int) -> float:
    """Mean tokens/s over 0-2 min for minute 1, else over the minute centred on `minute`."""
    lo, hi = (0.0, 120.0) if minute == 1 else ((minute - 0.5) * 60, (minute + 0.5) * 60)
    values = [s.tokens_per_second for s in result.samples if lo < s.t_s <= hi]
    return sum(values) / len(values)


def raw(name: str = "sd8gen3") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PROFILE_DIR / f"{name}.json").read_text())
    return data


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, bool], SimResult]:
    return {
        (name, gov): simulate(load_profile(name), 30, gov)
        for name in list_profiles()
        for gov in (False, True)
    }


def test_profiles_use_unit_named_keys() -> None:
    for name in list_profiles():
        data = raw(name)
        assert "ambient_c" in data
        assert "heat_capacity_j_per_k" in data["die"]
        assert "thermal_resistance_to_ambient_k_per_w" in data["skin"]
        for level in data["firmware"]["levels"]:
            assert level["clear_skin_c"] < level["trip_skin_c"]
        assert data["firmware"]["hold"]["control_skin_c"] < data["firmware"]["shutdown_skin_c"]


def test_default_profile_reproduces_published_unmanaged_curve(
    runs: dict[tuple[str, bool], SimResult],
) -> None:
    off = runs[("sd8gen3", False)]
    for minute, published in PUBLISHED.items():
        got = tokens_at(off, minute)
        assert abs(got / published - 1) <= 0.15, (minute, got, published)


def test_article_profile_reproduces_ttft_x4_after_10_minutes(runs: dict[tuple[str, bool], SimResult]) -> None:
    off = runs[("article7b", False)]
    assert off.ttft_ratio_10min is not None
    assert 3.4 <= off.ttft_ratio_10min <= 4.6
    assert off.throttled_seconds > 0


@pytest.mark.parametrize("name", list_profiles())
def test_governor_meets_acceptance_on_every_shipped_profile(
    name: str, runs: dict[tuple[str, bool], SimResult]
) -> None:
    off, on = runs[(name, False)], runs[(name, True)]
    assert on.decay_10min is not None and on.decay_10min <= 0.10
    assert on.mean_tokens_per_second >= 1.2 * off.mean_tokens_per_second
    assert on.throttled_seconds == 0
    assert on.p95_ttft_ratio <= 1.5


def test_firmware_monitor_levels_engage_and_release_with_hysteresis() -> None:
    prof = load_profile("sd8gen3")
    plant = ThermalPlant(prof)
    first = prof.firmware.levels[0]
    plant.skin_c = first.trip_skin_c + 0.01
    plant.update_firmware()
    assert plant.level >= 1
    plant.skin_c = (first.trip_skin_c + first.clear_skin_c) / 2  # inside the band: stays engaged
    plant.update_firmware()
    assert plant.level >= 1
    plant.skin_c = first.clear_skin_c - 0.01
    plant.update_firmware()
    assert plant.level == 0


def test_firmware_holds_the_skin_of_a_warm_phone_like_a_thermal_engine() -> None:
    prof = profile_from_dict(warm_case())
    off = simulate(prof, 30, governor=False)
    fw = prof.firmware
    assert fw.hold is not None and fw.emergency is not None
    # the monitor levels alone let this phone reach 60.9 °C; the power allocator holds it near its
    # control temperature, short of emergency and far from shutdown
    assert off.peak_skin_c < fw.emergency.trip_skin_c
    assert abs(off.samples[-1].skin_c - fw.hold.control_skin_c) < 1.0
    assert off.shutdown_at_s is None


def test_firmware_shuts_the_phone_down_past_its_last_threshold() -> None:
    data = warm_case()
    data["firmware"].pop("hold")
    data["firmware"].pop("emergency")
    data["firmware"]["shutdown_skin_c"] = 46.0
    off = simulate(profile_from_dict(data), 30, governor=False)
    assert off.shutdown_at_s is not None
    after = [s.tokens_per_second for s in off.samples if s.t_s > off.shutdown_at_s + 1]
    assert after and max(after) == 0.0  # nothing decodes on a phone that is off


def test_memory_bound_decode_scales_sublinearly_with_frequency() -> None:
    data = raw()
    data["firmware"]["levels"][0]["memory_bandwidth_fraction"] = 1.0  # frequency cap alone
    prof = profile_from_dict(data)
    plant = ThermalPlant(prof)
    act = Actuation(prof.unmanaged_threads, prof.unmanaged_cpus, prof.unmanaged_cpus)
    cold = plant.speeds(act)
    plant.skin_c = prof.firmware.levels[0].trip_skin_c
    plant.update_firmware()
    hot = plant.speeds(act)
    perf = prof.clusters[1]
    freq_ratio = plant.freq_ghz(perf) / perf.max_freq_ghz
    assert freq_ratio < 1.0
    assert freq_ratio < hot.decode_tokens_per_second / cold.decode_tokens_per_second < 1.0
    assert hot.decode_busy_power_w < cold.decode_busy_power_w


def test_a_frequency_cap_chosen_by_the_governor_saves_more_power_than_speed() -> None:
    prof = load_profile("sd8gen3")
    plant = ThermalPlant(prof)
    act = Actuation(4, (3, 4, 5, 6), (4, 5, 6, 7))
    full, capped = plant.speeds(act), plant.speeds(Actuation(4, (3, 4, 5, 6), (4, 5, 6, 7), freq_cap=0.7))
    speed = capped.decode_tokens_per_second / full.decode_tokens_per_second
    power = capped.decode_busy_power_w / full.decode_busy_power_w
    assert power < 0.5 < 0.7 < speed < 1.0


def test_bad_profile_is_rejected() -> None:
    data = raw()
    data["firmware"]["levels"][0]["clear_skin_c"] = data["firmware"]["levels"][0]["trip_skin_c"] + 1
    with pytest.raises(ValueError, match="clear_skin_c"):
        profile_from_dict(data)
    data = raw()
    data["firmware"]["shutdown_skin_c"] = 40.0
    with pytest.raises(ValueError, match="shutdown"):
        profile_from_dict(data)
    with pytest.raises(FileNotFoundError):
        load_profile("no-such-phone")
