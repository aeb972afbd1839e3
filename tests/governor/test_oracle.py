"""The oracle yardstick, the held-out phone generator, and `edgellm simulate --oracle / --policy pinned`."""

from __future__ import annotations

import json

import pytest

from edgellm.cli import main
from edgellm.sim.generator import (
    HELD_OUT_SEEDS,
    TUNING_SEEDS,
    HeldOutError,
    generate_profile,
    tuning_profiles,
)
from edgellm.sim.oracle import oracle
from edgellm.sim.profile import load_profile
from edgellm.sim.simulate import comfort_limit, phone_ladder, simulate


def test_the_oracle_respects_the_comfort_limit_and_beats_every_feasible_fixed_rung() -> None:
    prof = load_profile("sd8gen3")
    best = oracle(prof, 20)
    limit = comfort_limit(prof)
    assert best.run.peak_skin_c <= limit and best.run.throttled_seconds == 0
    for rung in phone_ladder(prof):
        run = simulate(prof, 20, governor=False, pinned=rung)
        if run.peak_skin_c <= limit and run.throttled_seconds == 0:
            assert best.mean_tokens_per_second >= run.mean_tokens_per_second - 1e-6


def test_pinning_the_fastest_rung_is_what_the_oracle_must_avoid() -> None:
    prof = load_profile("sd8gen3")
    fastest = simulate(prof, 20, governor=False, pinned=phone_ladder(prof)[0])
    assert fastest.governor == "pinned" and fastest.throttled_seconds > 0  # too hot to sustain


def test_generated_phones_are_deterministic_and_within_the_stated_ranges() -> None:
    for seed in TUNING_SEEDS[:8]:
        a, b = generate_profile(seed, purpose="tuning"), generate_profile(seed, purpose="tuning")
        assert a == b
        assert 15.0 <= a.ambient_c <= 35.0 and 2 <= len(a.clusters) <= 4
        assert 0.7 * 6.0 <= a.skin_to_ambient_resistance_k_per_w <= 1.3 * 6.0
        assert abs(a.firmware.levels[0].trip_skin_c - 40.5) <= 2.0
        assert comfort_limit(a) > a.ambient_c + a.static_power_w * a.skin_to_ambient_resistance_k_per_w


def test_tuning_code_cannot_reach_the_held_out_phones() -> None:
    assert len(HELD_OUT_SEEDS) >= 20 and not set(HELD_OUT_SEEDS) & set(TUNING_SEEDS)
    with pytest.raises(HeldOutError):
        generate_profile(HELD_OUT_SEEDS[0], purpose="tuning")
    with pytest.raises(HeldOutError):
        tuning_profiles((TUNING_SEEDS[0], HELD_OUT_SEEDS[3]))
    assert generate_profile(HELD_OUT_SEEDS[0]).name == f"held-out-{HELD_OUT_SEEDS[0]}"


def test_simulate_prints_the_oracle_beside_the_governor(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--minutes", "12", "--oracle", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["governor"] == "on" and out["oracle_mean_tokens_per_second"] > 0
    assert "t4" in out["oracle_actuation"] and out["oracle_ratio"] > 0.5


def test_simulate_pins_a_rung_and_refuses_a_rung_that_does_not_exist(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--minutes", "5", "--policy", "pinned", "--rung", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["governor"] == "pinned" and out["actuation"].startswith("little")
    assert main(["simulate", "--policy", "pinned", "--rung", "9"]) == 2
    assert "--rung must be within 0..3" in capsys.readouterr().err
    assert main(["simulate", "--rung", "1"]) == 2
    assert main(["simulate", "--profile", "gen-101", "--minutes", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile"] == "gen-101"
