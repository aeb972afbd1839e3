"""Capacity benchmark: the governor's estimate of the sustainable decode rate against the oracle's.

Each phone runs chat traffic under the real controller on the virtual phone for --minutes simulated
minutes (fake clock), the capacity estimator fed every control period as the daemon feeds it; the
estimate at the end is set beside the oracle's steady rate (the best fixed operating point under
the comfort limit, which knows the plant exactly). Phones: the shipped profiles, issue 18's warm
case, the first tuning phones, and the warm case in hot rooms (33-38 °C). Usage:
    python bench/bench_capacity.py [--minutes 30] [--json] [--[no-]revised-probe]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from edgellm.device.governor.capacity import CapacityEstimator
from edgellm.device.governor.controller import GovernorConfig, ThermalController
from edgellm.sim.generator import tuning_profiles
from edgellm.sim.oracle import oracle
from edgellm.sim.plant import ThermalPlant
from edgellm.sim.profile import PhoneProfile, load_profile, profile_from_dict, warm_case
from edgellm.sim.simulate import comfort_limit, phone_ladder
from edgellm.sim.workload import Workload

DT = 0.25  # plant step; the controller and the estimator run every 4 steps (1 s), as in simulate()


def hot_room(ambient_c: float) -> PhoneProfile:
    """sd8gen3 in a case (the warm-case copy) in a room at ambient_c."""
    data: dict[str, Any] = warm_case()
    data["ambient_c"] = ambient_c
    data["name"] = f"sd8gen3-case-{ambient_c:.0f}c"
    return profile_from_dict(data)


def estimate(profile: PhoneProfile, minutes: float, cfg: GovernorConfig | None = None) -> CapacityEstimator:
    """Chat traffic under the real controller for `minutes`, the estimator fed each control period."""
    cfg = cfg or GovernorConfig()
    limit = comfort_limit(profile, cfg)
    ctl = ThermalController(cfg, phone_ladder(profile), limit)
    est = CapacityEstimator()
    plant = ThermalPlant(profile)
    work = Workload(profile.workload.prompt_tokens, profile.workload.new_tokens)
    act, tps, tokens = ctl.current, 0.0, 0.0
    for i in range(round(minutes * 60 / DT)):
        t = i * DT
        if i % 4 == 0:
            age = None if work.last_prefill_s is None else t - work.last_prefill_s
            decision = ctl(plant.skin_c, t, die_c=plant.cpu_zone_c, tokens_per_second=tps, prefill_age_s=age)
            act = decision.actuation if decision is not None else act
            est.update(t, ctl.identifier.model, limit, plant.cpu_zone_c - plant.skin_c, tps, ctl.frontier)
        work.now = t
        n, joules = work.advance(plant, act, DT)
        plant.step(profile.static_power_w + joules / DT, DT)
        tokens += n
        if (i + 1) % 4 == 0:
            tps, tokens = tokens / (4 * DT), 0.0
    return est


def phones() -> list[PhoneProfile]:
    """The shipped profiles, the warm case, three tuning phones, the warm case in hot rooms."""
    shipped = [load_profile("sd8gen3"), load_profile("article7b"), profile_from_dict(warm_case())]
    tuning = [tuning_profiles()[k] for k in (0, 3, 7)]
    return shipped + tuning + [hot_room(a) for a in (33.0, 35.0, 38.0)]


def row(profile: PhoneProfile, minutes: float, cfg: GovernorConfig | None = None) -> dict[str, Any]:
    """One phone: the estimate, its state and basis, the oracle's steady rate and their ratio."""
    cap = estimate(profile, minutes, cfg).current
    best = oracle(profile, 1).steady_tokens_per_second
    tps = cap.tokens_per_second
    ratio = None if tps is None or best <= 0 else round(tps / best, 3)
    return {
        "phone": profile.name,
        "ambient_c": profile.ambient_c,
        "estimate_tokens_per_second": None if tps is None else round(tps, 3),
        "oracle_tokens_per_second": round(best, 3),
        "ratio": ratio,
        "state": str(cap.state),
        "basis": cap.basis,
    }


def main() -> int:
    """Print the table (or JSON lines)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--revised-probe",
        action=argparse.BooleanOptionalAction,
        default=GovernorConfig().revised_probe,
        help="GovernorConfig.revised_probe (default on since issue 30's fourth pass)",
    )
    ns = parser.parse_args()
    cfg = GovernorConfig(revised_probe=ns.revised_probe)
    print("| phone | ambient °C | estimate tok/s | oracle tok/s | ratio | state (basis) |")
    print("|---|---|---|---|---|---|")
    for profile in phones():
        r = row(profile, ns.minutes, cfg)
        if ns.json:
            print(json.dumps(r))
            continue
        print(
            f"| {r['phone']} | {r['ambient_c']:.1f} | {r['estimate_tokens_per_second']} | "
            f"{r['oracle_tokens_per_second']} | {r['ratio']} | {r['state']} ({r['basis']}) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
