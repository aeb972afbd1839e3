"""The virtual phone reproduces the published curves, and the governor meets the acceptance bar on it."""

from __future__ import annotations

import json

import pytest

from edgellm.device.governor.actuation import Actuation
from edgellm.device.virtual_phone.plant import ThermalPlant
from edgellm.device.virtual_phone.profile import PROFILE_DIR, list_profiles, load_profile, profile_from_dict
from edgellm.device.virtual_phone.simulate import SimResult, simulate

PUBLISHED = {1: 12.4, 5: 9.1, 10: 6.2, 15: 4.1, 30: 3.8}  # Snapdragon 8 Gen 3 CPU decode, DESIGN.md


def tokens_at(result: SimResult, minute: int) -> float:
    """Mean tokens/s over 0-2 min for minute 1, else over the minute centred on `minute`."""
    lo, hi = (0.0, 120.0) if minute == 1 else ((minute - 0.5) * 60, (minute + 0.5) * 60)
    values = [s.tokens_per_second for s in result.samples if lo < s.t_s <= hi]
    return sum(values) / len(values)


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, bool], SimResult]:
    return {
        (name, gov): simulate(load_profile(name), 30, gov)
        for name in list_profiles()
        for gov in (False, True)
    }


def test_profiles_use_unit_named_keys() -> None:
    for name in list_profiles():
        raw = json.loads((PROFILE_DIR / f"{name}.json").read_text())
        assert "ambient_c" in raw
        assert (
            "heat_capacity_j_per_k" in raw["die"] and "thermal_resistance_to_ambient_k_per_w" in raw["skin"]
        )
        for level in raw["firmware_levels"]:
            assert level["clear_skin_c"] < level["trip_skin_c"]


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
def test_governor_meets_acceptance_on_every_profile(
    name: str, runs: dict[tuple[str, bool], SimResult]
) -> None:
    off, on = runs[(name, False)], runs[(name, True)]
    assert on.decay_10min is not None and on.decay_10min <= 0.10
    assert on.mean_tokens_per_second >= 1.2 * off.mean_tokens_per_second
    assert on.throttled_seconds == 0
    assert on.p95_ttft_ratio <= 1.5


def test_firmware_hysteresis_engages_and_releases() -> None:
    prof = load_profile("sd8gen3")
    plant = ThermalPlant(prof)
    first = prof.firmware[0]
    plant.skin_c = first.trip_skin_c + 0.01
    plant.update_firmware()
    assert plant.level >= 1
    plant.skin_c = (first.trip_skin_c + first.clear_skin_c) / 2  # inside the band: stays engaged
    plant.update_firmware()
    assert plant.level >= 1
    plant.skin_c = first.clear_skin_c - 0.01
    plant.update_firmware()
    assert plant.level == 0


def test_memory_bound_decode_scales_sublinearly_with_frequency() -> None:
    raw = json.loads((PROFILE_DIR / "sd8gen3.json").read_text())
    raw["firmware_levels"][0]["memory_bandwidth_fraction"] = 1.0  # frequency cap alone
    prof = profile_from_dict(raw)
    plant = ThermalPlant(prof)
    act = Actuation(prof.unmanaged_threads, prof.unmanaged_cpus, prof.unmanaged_cpus)
    cold = plant.speeds(act)
    plant.skin_c = prof.firmware[0].trip_skin_c
    plant.update_firmware()
    hot = plant.speeds(act)
    perf = prof.clusters[1]
    freq_ratio = plant.freq_ghz(perf) / perf.max_freq_ghz
    assert freq_ratio < 1.0
    assert freq_ratio < hot.decode_tokens_per_second / cold.decode_tokens_per_second < 1.0
    assert hot.decode_busy_power_w < cold.decode_busy_power_w


def test_bad_profile_is_rejected() -> None:
    raw = json.loads((PROFILE_DIR / "sd8gen3.json").read_text())
    raw["firmware_levels"][0]["clear_skin_c"] = raw["firmware_levels"][0]["trip_skin_c"] + 1
    with pytest.raises(ValueError, match="clear_skin_c"):
        profile_from_dict(raw)
    with pytest.raises(FileNotFoundError):
        load_profile("no-such-phone")
