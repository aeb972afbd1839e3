"""The probe revision (GovernorConfig.revised_probe, on by default since issue 30's fourth pass;
docs/governor.md, "The wide tuning pool and the probe revision"): each mechanism on its own, with a
fake clock."""

from __future__ import annotations

import math

import pytest

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.controller import GovernorConfig
from edgellm.device.governor.frontier import Frontier, Point
from edgellm.device.governor.probe import Prober
from edgellm.sim.generator import (
    HELD_OUT_SEEDS,
    LOW_HEADROOM_HELD_OUT_SEEDS,
    LOW_HEADROOM_TUNING_POOL_SEEDS,
    LOW_HEADROOM_WIDE_POOL_SEEDS,
    TUNING_POOL_SEEDS,
    WIDE_TUNING_POOL_SEEDS,
    tuning_profiles,
)
from edgellm.sim.scorecard import SKIN_SLACK_C, score


def act(label: str, cpus: tuple[int, ...]) -> Actuation:
    return Actuation(4, cpus, (4, 5, 6, 7), label=label)


def hold(prober: Prober, t: float, speed: dict[str, float], gap: dict[str, float], until: float) -> float:
    """Decode on whatever the prober asks for, one reading a second, until `until` or done."""
    while not prober.done and t < until:
        label = prober.current.label
        prober.add(t, skin_c=30.0, aim_c=39.0, gap_k=gap[label], tokens_per_second=speed[label])
        t += 1.0
    return t


@pytest.mark.parametrize("revised", [False, True])
def test_a_rung_as_fast_but_cooler_is_dominated_only_without_the_revision(revised: bool) -> None:
    """A single mid core beside four little ones: as fast, less heat (lowheadroom-2048's case)."""
    rungs = [act("one-mid", (5,)), act("little", (0, 1, 2, 3))]  # the built order: little is coolest
    speed, gap = {"little": 8.2, "one-mid": 8.2}, {"little": 5.7, "one-mid": 3.0}
    prober = Prober(rungs, hold_s=30.0, revised=revised)
    hold(prober, 0.0, speed, gap, 200.0)
    measured = [r[0].label for r in prober.results]
    assert measured == (["little", "one-mid"] if revised else ["little"])


def test_a_resumed_probe_restarts_its_clock() -> None:
    """Minutes on the frontier between stop and resume were counted as 10 s held (gen-1009)."""
    rungs = [act("fastest", (4, 5, 6, 7)), act("little", (0, 1))]
    speed, gap = {"little": 4.0, "fastest": 7.0}, {"little": 3.0, "fastest": 7.0}
    prober = Prober(rungs, hold_s=30.0, revised=True)
    t = hold(prober, 0.0, speed, gap, 31.0)
    prober.stopped = True  # the skin stopped it; the governor ran the frontier for 5 minutes
    prober.add(t, 30.0, 39.0, gap["little"], speed["little"])
    prober.resume()
    prober.add(t + 300.0, 30.0, 39.0, gap["little"], speed["little"])  # still the old rung's speed
    assert prober.held == 0.0
    hold(prober, t + 301.0, speed, gap, t + 400.0)
    assert [r[0].label for r in prober.results] == ["little", "fastest"]


def test_a_paced_probe_recovers_the_full_duty_point_at_the_decode_rate_in_force() -> None:
    rungs = [act("middle", (4, 5, 6, 7)), act("little", (0, 1))]
    prober = Prober(rungs, hold_s=30.0, revised=True)
    prober.results.append((rungs[1], 3.0, 4.0))
    prober.step, prober.stopped = 1, True
    idle, full_gap, full_tps = 1.0, 6.0, 10.0
    prober.pace(duty=0.2, idle_gap_k=idle, tokens_per_second=1.0)
    t, duties = 0.0, []
    while not prober.done and t < 200:
        duty = prober.current.duty
        duties.append(duty)
        prober.add(t, 38.0, 38.0, idle + duty * (full_gap - idle), duty * full_tps)
        t += 1.0
    assert duties[0] == 0.2 and duties[-1] == pytest.approx(0.1)  # matched: 1 tok/s of a 10 tok/s rung
    label, gap, tps = prober.results[-1]
    assert label.label == "middle" and gap == pytest.approx(full_gap) and tps == pytest.approx(full_tps)


def test_a_learnt_idle_re_ranks_the_rungs() -> None:
    """Idle guessed low drops the little cores from the hull; the learnt idle brings them back."""
    middle = Point(act("middle-half", (5, 6)), 6.0, 8.0)
    little = Point(act("little", (0, 1)), 3.3, 4.0)
    fr = Frontier([middle, little], idle_gap_k=0.5)
    assert [p.actuation.label for p in fr.hull] == ["middle-half"]
    fr.idle_gap_k = 2.0
    assert fr.rehull() and [p.actuation.label for p in fr.hull] == ["middle-half", "little"]


def test_the_wide_tuning_pool_holds_no_held_out_seed() -> None:
    pool = set(TUNING_POOL_SEEDS) | set(LOW_HEADROOM_TUNING_POOL_SEEDS)
    pool |= set(WIDE_TUNING_POOL_SEEDS) | set(LOW_HEADROOM_WIDE_POOL_SEEDS)
    assert len(pool) == 800 and not pool & (set(HELD_OUT_SEEDS) | set(LOW_HEADROOM_HELD_OUT_SEEDS))


def test_a_resumed_probe_stops_where_the_skin_is_heading_not_where_it_is() -> None:
    """gen-3194: the hottest rung heats the skin ~0.12 °C/s and it kept rising 1.4 °C after the stop."""
    rungs = [act("fastest", (4, 5, 6, 7)), act("little", (0, 1))]
    prober = Prober(rungs, hold_s=30.0, revised=True)
    prober.results.append((rungs[1], 3.0, 4.0))
    prober.step, prober.stopped = 1, True
    prober.resume()
    t, skin = 0.0, 34.0
    while not prober.done and t < 60.0:  # aim 39 °C: the old rule stopped only at 38.25 °C
        prober.add(t, skin, 39.0, 11.0, 15.0)
        t, skin = t + 1.0, skin + 0.12
    assert prober.done and skin < 36.0
    assert prober.results[-1][0].label != "fastest"  # 5 s held: too short to fit, given up


def test_a_hot_rung_probed_late_does_not_carry_the_skin_over_comfort_on_gen_3194() -> None:
    """The wide pool's overshoot (held-out-9013's mode): +0.68 °C over comfort before the lead."""
    (profile,) = tuning_profiles((3194,))
    sc, _ = score(profile, 30.0, GovernorConfig(revised_probe=True))
    assert sc.over_comfort_c <= SKIN_SLACK_C and sc.passed, sc.row()


def test_a_paced_reading_under_the_learnt_idle_lowers_the_idle_so_the_frontier_can_be_built() -> None:
    """lowheadroom-4170 (paced probe started under the aim, a variant not kept): a learnt idle of 2.25 K put
    middle-half's full-duty gap under idle, no frontier could be built and the governor ran the ladder."""
    rungs = [act("middle-half", (5,)), act("little", (0, 1))]
    prober = Prober(rungs, hold_s=30.0, revised=True)
    prober.results.append((rungs[1], 5.5, 10.0))
    prober.step, prober.stopped = 1, True
    true_idle, full_gap, full_tps = 1.5, 4.0, 8.0
    prober.pace(duty=0.3, idle_gap_k=2.25, tokens_per_second=2.4)
    t, start = 0.0, 0.0
    while not prober.done and t < 200:
        duty = prober.current.duty
        if prober.held == 0.0:
            start = t  # a hold (re)starts: the die heats towards the rung's paced gap over ~5 s
        settling = 1.0 - 0.6 * math.exp(-(t - start) / 5.0)
        prober.add(t, 38.0, 38.0, true_idle + settling * duty * (full_gap - true_idle), duty * full_tps)
        t += 1.0
    assert prober.paced is not None and prober.paced[1] < 2.25  # bounded by the readings
    idle = prober.paced[1]
    label, gap, _ = prober.results[-1]
    assert label.label == "middle-half" and gap > idle
    assert prober.frontier(0.05, idle) is not None
