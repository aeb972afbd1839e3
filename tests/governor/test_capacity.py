"""The capacity estimate against known plants (the virtual phone, fake clock; the loop is
bench/bench_capacity.py's), and its hysteresis."""

from __future__ import annotations

import pytest

from bench.bench_capacity import estimate, hot_room
from edgellm.client.commands.status import capacity_line
from edgellm.device.governor.capacity import (
    CapacityConfig,
    CapacityState,
    Hysteresis,
    refuses,
    speed_at,
)
from edgellm.sim.generator import tuning_profiles
from edgellm.sim.oracle import oracle
from edgellm.sim.profile import PhoneProfile, load_profile, profile_from_dict, warm_case
from edgellm.v1 import device_pb2


@pytest.mark.parametrize(
    "profile",
    [
        load_profile("sd8gen3"),
        load_profile("article7b"),
        profile_from_dict(warm_case()),
        tuning_profiles()[0],
        tuning_profiles()[7],
    ],
    ids=lambda p: p.name,
)
def test_the_estimate_converges_on_what_the_best_fixed_operating_point_sustains(
    profile: PhoneProfile,
) -> None:
    est = estimate(profile, 20)
    cap = est.current
    best = oracle(profile, 1).steady_tokens_per_second  # knows the plant exactly
    assert cap.state == CapacityState.AVAILABLE and cap.basis == "frontier"
    assert cap.tokens_per_second is not None
    assert 0.9 * best <= cap.tokens_per_second <= 1.1 * best, (cap.tokens_per_second, best)


def test_a_hot_room_exhausts_the_headroom_the_idle_phone_already_passes_the_limit() -> None:
    cap = estimate(hot_room(35.0), 10).current
    assert oracle(hot_room(35.0), 1).steady_tokens_per_second == 0.0  # nothing holds the limit
    assert cap.state == CapacityState.EXHAUSTED
    assert cap.tokens_per_second == 0.0 and cap.basis == "idle over the limit"
    assert cap.retry_after_s >= CapacityConfig().exit_after_s


def test_before_the_model_has_data_the_capacity_is_unknown_and_nothing_is_refused() -> None:
    est = estimate(load_profile("sd8gen3"), 0.25)
    assert est.current.tokens_per_second is None and est.state == CapacityState.UNKNOWN
    assert not refuses(est.state, "comfort")


def test_speed_reads_the_upper_hull_through_idle_and_stops_at_the_fastest_point() -> None:
    points = [(3.0, 5.0), (6.0, 9.0), (5.0, 6.0), (9.0, 8.0)]  # (5, 6) is under the hull, (9, 8) hotter
    assert speed_at(points, 1.0, 1.0) == 0.0
    assert speed_at(points, 1.0, 2.0) == pytest.approx(2.5)  # pacing the coolest point
    assert speed_at(points, 1.0, 4.5) == pytest.approx(7.0)  # a time share of (3, 5) and (6, 9)
    assert speed_at(points, 1.0, 12.0) == 9.0
    assert speed_at([], 1.0, 5.0) == 0.0


CFG = CapacityConfig(floor_tokens_per_second=1.0, exit_factor=1.5, enter_after_s=30.0, exit_after_s=120.0)


def feed(h: Hysteresis, start: float, seconds: int, tps: float | None) -> CapacityState:
    """One estimate a second for `seconds`; the state at the end."""
    state = h.state
    for k in range(seconds):
        state = h(start + k, tps)
    return state


def test_a_dip_below_the_floor_shorter_than_the_enter_time_does_not_enter() -> None:
    h = Hysteresis(CFG)
    assert feed(h, 0, 10, 3.0) == CapacityState.AVAILABLE
    assert feed(h, 10, 29, 0.5) == CapacityState.AVAILABLE
    assert feed(h, 39, 5, 3.0) == CapacityState.AVAILABLE
    assert feed(h, 44, 29, 0.5) == CapacityState.AVAILABLE  # the dwell starts again after a recovery
    assert feed(h, 73, 2, 0.5) == CapacityState.EXHAUSTED


def test_an_estimate_wandering_around_the_floor_does_not_flap() -> None:
    h = Hysteresis(CFG)
    feed(h, 0, 31, 0.5)
    assert h.state == CapacityState.EXHAUSTED
    states = {h(31.0 + k, 1.0 + 0.4 * ((-1) ** k)) for k in range(600)}  # 0.6 <-> 1.4 tok/s for 10 min
    assert states == {CapacityState.EXHAUSTED}  # never above the exit level (1.5)


def test_it_leaves_only_after_the_exit_time_above_the_exit_level() -> None:
    h = Hysteresis(CFG)
    feed(h, 0, 31, 0.0)
    assert feed(h, 31, 119, 2.0) == CapacityState.EXHAUSTED
    assert feed(h, 150, 10, 1.2) == CapacityState.EXHAUSTED  # below the exit level: the hold restarts
    assert feed(h, 160, 119, 2.0) == CapacityState.EXHAUSTED
    assert feed(h, 279, 2, 2.0) == CapacityState.AVAILABLE


def test_an_unknown_estimate_never_refuses_and_a_zero_floor_never_exhausts() -> None:
    h = Hysteresis(CFG)
    feed(h, 0, 31, 0.0)
    assert h(31, None) == CapacityState.UNKNOWN
    never = Hysteresis(CapacityConfig(floor_tokens_per_second=0.0))
    assert feed(never, 0, 600, 0.0) == CapacityState.AVAILABLE


def test_only_the_comfort_policy_refuses_while_exhausted() -> None:
    assert refuses(CapacityState.EXHAUSTED, "comfort")
    assert not refuses(CapacityState.EXHAUSTED, "throughput")
    assert not refuses(CapacityState.AVAILABLE, "comfort")


def test_status_prints_the_capacity_and_the_refusal_and_nothing_for_an_older_daemon() -> None:
    exhausted = device_pb2.GovernorState(
        capacity_tokens_per_second=0.0,
        capacity_floor_tokens_per_second=1.0,
        capacity_state=device_pb2.CAPACITY_STATE_THERMAL_HEADROOM_EXHAUSTED,
        capacity_basis="idle over the limit",
        capacity_retry_after_s=420,
        refusing_generations=True,
    )
    assert capacity_line(exhausted) == (
        "capacity 0.00 tok/s sustainable (idle over the limit; floor 1.00)  thermal headroom exhausted: "
        "refusing generations, retry after 420 s"
    )
    unknown = device_pb2.GovernorState(capacity_state=device_pb2.CAPACITY_STATE_UNKNOWN)
    assert capacity_line(unknown) == "capacity ? tok/s (floor 0.00)  not known yet"
    assert capacity_line(device_pb2.GovernorState()) == ""
