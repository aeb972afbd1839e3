"""Issue 30's sixth pass (docs/governor.md, "The settled probe"): with frequency caps the ladder's
built order is not cool to hot, the start-up probe stops on its headroom share before a capped larger
core set that is faster and cooler, and the governor settles blending below its measured top where
the extension never fires. Once the gap loop has settled under the aim, the unmeasured rungs are held
at the decode rate in force; one that reads over the gap in force there is left at once."""

from __future__ import annotations

import pytest

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.controller import GovernorConfig
from edgellm.device.governor.probe import Prober
from edgellm.sim.generator import tuning_profiles
from edgellm.sim.scorecard import RATIO_BAR, score


def act(label: str, cpus: tuple[int, ...], cap: float = 1.0) -> Actuation:
    return Actuation(4, cpus, (3, 4, 5, 6), label=label, freq_cap=cap)


def test_a_settled_paced_probe_keeps_a_cooler_rung_and_leaves_a_hotter_one_at_once() -> None:
    """Gap in force 5.8 K at 10.4 tok/s; middle@70% runs it at 5.2 K, fastest at 10 K (matched)."""
    idle = 1.1
    full = {"middle@70%": (12.2, 5.8), "fastest": (14.5, 17.7)}  # (tok/s, gap) at full duty
    rungs = [act("fastest", (3, 4, 5, 6)), act("middle@70%", (2, 3, 4, 5), 0.7), act("little", (0, 1))]
    prober = Prober(rungs, hold_s=40.0, revised=True, paced_late_mean=True)
    prober.results.append((rungs[2], 2.5, 8.0))
    prober.step, prober.stopped = 1, True
    prober.pace(duty=0.5, idle_gap_k=idle, tokens_per_second=10.4, gap_in_force_k=5.8)
    t, held_on = 0.0, {"middle@70%": 0.0, "fastest": 0.0}
    while not prober.done and t < 300:
        cur = prober.current
        tps, gap = full[cur.label]
        held_on[cur.label] += 1.0
        prober.add(t, 37.0, 40.0, idle + cur.duty * (gap - idle), cur.duty * tps)
        t += 1.0
    assert [r[0].label for r in prober.results] == ["little", "middle@70%"]
    assert prober.results[-1][1] == pytest.approx(5.8, abs=0.05)
    assert held_on["fastest"] <= 6.0 < 40.0 <= held_on["middle@70%"], held_on


@pytest.mark.parametrize(("settled", "passes"), [(False, False), (True, True)])
def test_the_pool_phone_whose_capped_middle_cluster_went_unmeasured_meets_the_ratio_bar(
    settled: bool, passes: bool
) -> None:
    """gen-3266: middle@70% (12.2 tok/s at 5.8 K) sits after middle-half (11.1 at 7.2 K) in the built
    order; the probe stopped after middle-half and the governor blended it at 0.84x the oracle."""
    (profile,) = tuning_profiles((3266,))
    card, _ = score(profile, 30.0, GovernorConfig(settled_probe=settled))
    assert (card.passed and card.ratio >= RATIO_BAR) is passes, card.row()
