"""Online identification of the skin model, the start-up probe and the measured frontier."""

from __future__ import annotations

import math
import random

import pytest

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.frontier import Frontier, Point, upper_hull
from edgellm.device.governor.identify import SkinIdentifier
from edgellm.device.governor.probe import Prober, settled_gap


def two_node_run(
    seconds: int, r_ds: float, r_sa: float, c_skin: float, ambient: float
) -> list[tuple[float, float, float]]:
    """(t, skin, die) of a die/skin RC pair under a power that steps every 5 minutes, with sensor noise."""
    rng = random.Random(7)
    die = skin = ambient
    c_die = 4.0
    out = []
    for t in range(seconds):
        power = (5.0, 2.0, 3.5, 1.0)[(t // 300) % 4]
        for _ in range(4):  # 0.25 s Euler steps
            q_ds = (die - skin) / r_ds
            die += (power - q_ds) * 0.25 / c_die
            skin += (q_ds - (skin - ambient) / r_sa) * 0.25 / c_skin
        out.append((float(t), skin + rng.gauss(0, 0.05), die + rng.gauss(0, 0.05)))
    return out


def test_identification_recovers_gain_ambient_and_time_constant_of_an_unseen_phone() -> None:
    r_ds, r_sa, c_skin, ambient = 1.6, 8.0, 55.0, 31.0  # far from the prior (2.2, 6, 70, first reading)
    ident = SkinIdentifier()
    model = ident.model
    for t, skin, die in two_node_run(1500, r_ds, r_sa, c_skin, ambient):
        model = ident.add(t, skin, die)
    assert model.updates > 100
    assert model.gain == pytest.approx(r_sa / r_ds, rel=0.15)
    assert model.ambient_c == pytest.approx(ambient, abs=0.6)
    assert model.tau_s == pytest.approx(r_sa * c_skin, rel=0.2)
    # what the governor uses: the gap that holds the skin at 40 °C
    assert model.gap_for(40.0) == pytest.approx((40.0 - ambient) * r_ds / r_sa, rel=0.15)


def test_identification_skips_windows_across_a_power_step() -> None:
    ident = SkinIdentifier()
    for t in range(50):  # a gap jumping 1 -> 9 K inside every window so far: a transient, not data
        ident.add(float(t), 30.0 + 0.01 * t, 31.0 + 0.01 * t + (8.0 if t > 12 else 0.0))
    assert ident.model.updates == 0


def test_settled_gap_is_the_asymptote_of_a_first_order_response() -> None:
    times = [float(t) for t in range(40)]
    gaps = [6.0 - 4.0 * math.exp(-t / 9.0) for t in times]  # 40 s hold of a die with tau 9 s
    assert settled_gap(times, gaps) == pytest.approx(6.0, abs=0.05)


def act(label: str, cpus: tuple[int, ...]) -> Actuation:
    return Actuation(4, cpus, (4, 5, 6, 7), label=label)


def test_the_hull_drops_rungs_that_are_slower_for_the_same_heat() -> None:
    fastest = Point(act("fastest", (4, 5, 6, 7)), 13.0, 12.4)  # prime core waits at the barrier
    middle = Point(act("middle", (3, 4, 5, 6)), 8.0, 12.4)
    half = Point(act("middle-half", (5, 6)), 4.8, 9.5)
    single = Point(act("single-big", (6,)), 4.0, 6.0)  # under the line from idle to middle-half
    little = Point(act("little", (0, 1)), 2.6, 5.2)
    hull = upper_hull([fastest, middle, half, single, little], idle_gap_k=1.5)
    assert [p.actuation.label for p in hull] == ["middle", "middle-half", "little"]


def test_frontier_positions_map_to_gaps_blends_and_pacing() -> None:
    middle = Point(act("middle", (3, 4, 5, 6)), 8.0, 12.0)
    little = Point(act("little", (0, 1)), 3.0, 6.0)
    fr = Frontier([middle, little], idle_gap_k=1.0, min_duty=0.05)
    assert fr.position(9.0) == 0.0 and fr.actuation(0.0).cpus == middle.actuation.cpus
    mid = fr.actuation(0.5)  # half the time on each: tokens go 2:1 to the faster rung
    assert mid.cpus == little.actuation.cpus and mid.blend_cpus == middle.actuation.cpus
    assert mid.blend == pytest.approx(2 / 3, abs=1e-3)
    assert fr.gap(0.5) == pytest.approx(5.5)
    assert fr.position(fr.gap(1.7)) == pytest.approx(1.7)  # pacing: duty halves per position
    assert fr.actuation(2.0).duty == pytest.approx(0.5)
    assert fr.actuation(fr.max_position).duty == pytest.approx(0.05)


def test_probe_measures_coolest_first_and_skips_a_rung_no_faster_than_a_cooler_one() -> None:
    rungs = [act("fastest", (4, 5, 6, 7)), act("middle", (3, 4, 5, 6)), act("little", (0, 1))]
    speed = {"little": 5.0, "middle": 12.0, "fastest": 12.0}
    gap = {"little": 3.0, "middle": 8.0, "fastest": 13.0}
    prober = Prober(rungs, hold_s=30.0)
    seen: list[str] = []
    t = 0.0
    while not prober.done and t < 500:
        label = prober.current.label
        if not seen or seen[-1] != label:
            seen.append(label)
        prober.add(t, skin_c=30.0, aim_c=39.0, gap_k=gap[label], tokens_per_second=speed[label])
        t += 1.0
    assert seen == ["little", "middle", "fastest"]
    assert [r[0].label for r in prober.results] == ["little", "middle"]  # fastest: skipped after 10 s
    assert t < 30 + 30 + 15
    fr = prober.frontier(0.05)
    assert fr is not None and [p.actuation.label for p in fr.hull] == ["middle", "little"]


def test_probe_stops_when_the_skin_uses_its_share_of_the_headroom() -> None:
    rungs = [act("fastest", (4, 5, 6, 7)), act("little", (0, 1))]
    prober = Prober(rungs, hold_s=30.0, headroom_share=0.25)
    t, skin = 0.0, 35.0
    while not prober.done and t < 200:
        prober.add(t, skin_c=skin, aim_c=39.0, gap_k=3.0, tokens_per_second=5.0 + t / 10)
        skin += 0.05  # heating 3 K a minute: 1 K of a 4 K headroom is used after 20 s of the 2nd rung
        t += 1.0
    assert prober.stopped and len(prober.results) == 1 and prober.remaining == 1
    prober.resume()
    assert not prober.done
