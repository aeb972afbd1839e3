"""The governor's acceptance bars on every generated phone, as docs/benchmarks.md claims them.

The simulator is deterministic and a 30-minute run of one phone takes ~0.2 s, so the whole held-out
set (seeds 9001–9024, never tuned on), the tuning set, issue 18's warm-case phone, the low-headroom
held-out set (seeds 9101–9124: hot rooms, cases, chargers) and the fresh held-out draws (held-out-2,
seeds 9501–9524, and lowheadroom-held-out-2, 9601–9624; held-out-3, 9701–9724, and
lowheadroom-held-out-3, 9801–9824; held-out-4, 9901–9924, and lowheadroom-held-out-4, 9951–9974;
held-out-5, 70101–70124, and lowheadroom-held-out-5, 70151–70174; held-out-6, 90101–90124, and
lowheadroom-held-out-6, 90151–90174) run here with the same bars as bench/bench_thermal.py (~60 s in
all, without the unmanaged runs the comfort bars ignore; the throughput policy is tested in
test_policies.py).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench.bench_thermal import failures, warm_case_phones
from edgellm.sim.generator import (
    held_out_2_profiles,
    held_out_3_profiles,
    held_out_4_profiles,
    held_out_5_profiles,
    held_out_6_profiles,
    held_out_profiles,
    tuning_profiles,
)
from edgellm.sim.profile import PhoneProfile
from edgellm.sim.scorecard import RATIO_BAR, RIPPLE_BAR, SKIN_SLACK_C, Score, score
from edgellm.sim.situations import (
    low_headroom_held_out_2_profiles,
    low_headroom_held_out_3_profiles,
    low_headroom_held_out_4_profiles,
    low_headroom_held_out_5_profiles,
    low_headroom_held_out_6_profiles,
    low_headroom_held_out_profiles,
)

ROOT = Path(__file__).resolve().parents[2]
HELD_OUT = held_out_profiles()
HELD_OUT_2 = held_out_2_profiles()
HELD_OUT_3 = held_out_3_profiles()
HELD_OUT_4 = held_out_4_profiles()
HELD_OUT_5 = held_out_5_profiles()
HELD_OUT_6 = held_out_6_profiles()
ALL_HELD_OUT = HELD_OUT + HELD_OUT_2 + HELD_OUT_3 + HELD_OUT_4 + HELD_OUT_5 + HELD_OUT_6
TUNING = tuning_profiles()
LOW_HEADROOM = low_headroom_held_out_profiles()
LOW_HEADROOM_2 = low_headroom_held_out_2_profiles()
LOW_HEADROOM_3 = low_headroom_held_out_3_profiles()
LOW_HEADROOM_4 = low_headroom_held_out_4_profiles()
LOW_HEADROOM_5 = low_headroom_held_out_5_profiles()
LOW_HEADROOM_6 = low_headroom_held_out_6_profiles()
ALL_LOW_HEADROOM = (
    LOW_HEADROOM + LOW_HEADROOM_2 + LOW_HEADROOM_3 + LOW_HEADROOM_4 + LOW_HEADROOM_5 + LOW_HEADROOM_6
)
# The governor's misses on the held-out sets (docs/governor.md, "The tenth pass"): its one evaluation
# after the tenth pass's partial fit shipped, as it came (held-out-9921, 0.879 before, now meets them at
# 0.995; held-out-9020's ripple 0.220 unchanged; the fresh sixth draw meets every bar). Strict: a governor
# that meets the bars there fails this until the doc moves.
HELD_OUT_MISSES = {"held-out-9020": "steady-state ripple 0.220"}


CARDS: dict[str, Score] = {}  # by phone name: each phone is simulated once per session


def card_of(phone: PhoneProfile) -> Score:
    """The phone's 30-minute score (computed once)."""
    if phone.name not in CARDS:
        CARDS[phone.name] = score(phone, 30.0)[0]
    return CARDS[phone.name]


def assert_meets_every_bar(phone: PhoneProfile) -> Score:
    """Score one phone for 30 simulated minutes and assert each bar on its own (a precise failure)."""
    card = card_of(phone)
    assert card.ratio >= RATIO_BAR, f"{phone.name}: governor/oracle {card.ratio} < {RATIO_BAR}"
    assert card.throttled_s == 0, f"{phone.name}: firmware throttled {card.throttled_s} s"
    assert card.over_comfort_c <= SKIN_SLACK_C, f"{phone.name}: skin {card.over_comfort_c:+} °C over comfort"
    assert card.ripple <= RIPPLE_BAR, f"{phone.name}: steady-state ripple {card.ripple} > {RIPPLE_BAR}"
    assert card.passed
    return card


def test_the_held_out_set_is_the_24_documented_seeds() -> None:
    assert [p.name for p in HELD_OUT] == [f"held-out-{seed}" for seed in range(9001, 9025)]
    assert [p.name for p in HELD_OUT_2] == [f"held-out-{seed}" for seed in range(9501, 9525)]
    assert [p.name for p in HELD_OUT_3] == [f"held-out-{seed}" for seed in range(9701, 9725)]
    assert [p.name for p in HELD_OUT_4] == [f"held-out-{seed}" for seed in range(9901, 9925)]
    assert [p.name for p in HELD_OUT_5] == [f"held-out-{seed}" for seed in range(70101, 70125)]
    assert [p.name for p in HELD_OUT_6] == [f"held-out-{seed}" for seed in range(90101, 90125)]


def held_out_case(phone: PhoneProfile) -> object:
    miss = HELD_OUT_MISSES.get(phone.name)
    reason = f"documented miss: {miss}"
    return pytest.param(phone, marks=pytest.mark.xfail(strict=True, reason=reason)) if miss else phone


@pytest.mark.parametrize(
    "phone", [held_out_case(p) for p in ALL_HELD_OUT], ids=[p.name for p in ALL_HELD_OUT]
)
def test_the_governor_meets_every_bar_on_each_held_out_phone(phone: PhoneProfile) -> None:
    assert_meets_every_bar(phone)


@pytest.mark.parametrize("phone", TUNING, ids=[p.name for p in TUNING])
def test_the_governor_meets_every_bar_on_each_tuning_phone(phone: PhoneProfile) -> None:
    assert_meets_every_bar(phone)


def test_the_governor_meets_every_bar_on_the_warm_case_phone() -> None:
    (phone,) = warm_case_phones()
    assert_meets_every_bar(phone)


@pytest.mark.parametrize(
    "phone",
    ALL_LOW_HEADROOM,
    ids=[p.name for p in ALL_LOW_HEADROOM],
)
def test_the_comfort_governor_meets_its_bars_on_each_low_headroom_held_out_phone(phone: PhoneProfile) -> None:
    """≥ 0.9× the oracle, no firmware throttling, the skin under the first trip (ripple is reported)."""
    card = card_of(phone)
    assert card.ratio >= RATIO_BAR, f"{phone.name}: governor/oracle {card.ratio} < {RATIO_BAR}"
    assert card.throttled_s == 0, f"{phone.name}: firmware throttled {card.throttled_s} s"
    assert card.over_trip_c < 0, f"{phone.name}: skin {card.over_trip_c:+} °C over the first trip"
    assert card.comfort_passed


@pytest.mark.parametrize(
    ("phones", "worst", "over_trip"),
    [
        (LOW_HEADROOM, 0.964, -0.4),
        (LOW_HEADROOM_2, 0.939, -0.3),
        (LOW_HEADROOM_3, 0.96, -0.03),
        (LOW_HEADROOM_4, 0.951, -0.36),
        (LOW_HEADROOM_5, 0.974, -0.23),
        (LOW_HEADROOM_6, 0.941, -0.01),
    ],
)
def test_the_documented_low_headroom_figures_are_what_the_simulator_gives(
    phones: list[PhoneProfile], worst: float, over_trip: float
) -> None:
    """docs/governor.md quotes them; half of each set idles within 2 °C of its first trip."""
    cards = [card_of(p) for p in phones]
    assert sum(c.first_trip_c - c.idle_skin_c <= 2.0 for c in cards) == 12
    assert min(c.ratio for c in cards) == worst
    assert max(c.throttled_s for c in cards) == 0
    assert max(c.over_trip_c for c in cards) == over_trip


def test_the_documented_worst_held_out_figures_are_what_the_simulator_gives() -> None:
    """docs/benchmarks.md quotes the worst case of each bar; the simulator is deterministic."""
    cards = {p.name: card_of(p) for p in ALL_HELD_OUT}
    met = [c for name, c in cards.items() if name not in HELD_OUT_MISSES]
    # held-out-70101 (held-out 0.951 -9012, held-out-2 0.938 -9509, held-out-3 0.918 -9722, held-out-4
    # 0.929 -9903, held-out-6 0.949 -90112)
    assert min(c.ratio for c in met) == 0.914
    assert max(c.throttled_s for c in cards.values()) == 0
    assert max(c.over_comfort_c for c in cards.values()) == 0.06  # held-out-9921 (then held-out-9508 0.01)
    assert round(max(c.ripple for c in met), 3) == 0.104  # held-out-9015
    assert cards["held-out-9020"].ripple == 0.2204 and cards["held-out-9921"].ratio == 0.995


def test_the_bench_names_every_missed_bar() -> None:
    (phone,) = warm_case_phones()
    good = card_of(phone)
    bad = replace(good, ratio=0.5, ripple=0.3)
    shipped = {"shipped": {"acceptance": {"sd8gen3": {"throughput_ok": True, "no_throttling": False}}}}
    missed = failures(shipped, {"warm-case": [good, bad]})
    assert missed[0] == "shipped sd8gen3: no_throttling is false"
    assert len(missed) == 2 and "ratio 0.5 (bar 0.9)" in missed[1] and "ripple 0.3 (bar 0.15)" in missed[1]
    assert failures({}, {"warm-case": [good]}) == []


def test_bench_thermal_exits_non_zero_when_a_bar_fails_and_zero_when_all_pass() -> None:
    """One simulated minute has no 10-minute decay and no time to beat unmanaged: the bars fail."""
    cmd = [sys.executable, "bench/bench_thermal.py", "--json"]
    passing = subprocess.run(
        [*cmd, "--sets", "shipped,warm-case", "--minutes", "30"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert passing.returncode == 0, passing.stderr
    short = subprocess.run(
        [*cmd, "--sets", "shipped", "--minutes", "1"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert short.returncode == 1, short.stdout
    assert "FAILED shipped sd8gen3: decay_10min_ok is false" in short.stderr
