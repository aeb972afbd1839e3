"""The wide tuning pool: 100 ordinary and 100 low-headroom tuning phones, scored on the comfort bars.

Tuning on 24 phones per set let failure modes through that only a held-out set then showed (issue
30). This scores more phones drawn from the same generators with tuning seeds
(`TUNING_POOL_SEEDS` 1001-1100, `LOW_HEADROOM_TUNING_POOL_SEEDS` 2001-2100; never a held-out seed:
the generators refuse them for tuning) and lists each missed bar: ordinary phones every bar of the
tuning set (oracle ratio, throttling, comfort + 0.5 °C, ripple), low-headroom phones the comfort bars.
30 simulated minutes per phone (~0.4 s of CPU each). Usage:
    python bench/bench_tuning_pool.py [--[no-]revised-probe] [--cold-shift K] [--cold-shift-after S]
        [--cold-shift-over S] [--resumed-min-fit S] [--pace-settled-under K] [--wide]
        [--warm | --warm-only] [--only gen-1057,...] [--jobs 2] [--out F.json]
--wide adds `WIDE_TUNING_POOL_SEEDS` 3001-3300 and `LOW_HEADROOM_WIDE_POOL_SEEDS` 4001-4300 (800 phones,
~3-5 min on 2 processes). --warm adds the warm two-cluster pool (issue 30, seventh pass): of
`WARM_POOL_CANDIDATE_SEEDS` 20001-60000, the ordinary phones in a 26-31 °C room with two clusters whose
idle skin sits 2-4.5 °C under the comfort limit (303 phones, scored on the ordinary bars; ~2 min). A
held-out seed is refused there too (`generate_profile(purpose="tuning")`). --cold-shift sets
`IdentifyConfig.cold_start_shift_k` (1.5 K since the ninth pass; 0: the prior stays centred on the first
reading, the governor before it), --cold-shift-after / --cold-shift-over its ramp (180 s / 60 s; 0 and 0:
at the first reading, as the eighth pass tried it). --resumed-min-fit sets `GovernorConfig.resumed_min_fit_s`
(14 s, on since issue 30's tenth pass: a resumed hold the skin's lookahead stops keeps its fit from 14 s;
`--resumed-min-fit none` is the old rule, the probe's 20 s fit, under which the rung is given up),
--pace-settled-under `GovernorConfig.pace_settled_under_c` (0; 1.0: the paced probe also starts with the gap
loop settled up to 1 K under the aim, tried in the same pass).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgellm.device.governor.controller import GovernorConfig
from edgellm.sim.generator import (
    HELD_OUT_ANY,
    LOW_HEADROOM_TUNING_POOL_SEEDS,
    LOW_HEADROOM_WIDE_POOL_SEEDS,
    TUNING_POOL_SEEDS,
    WARM_POOL_CANDIDATE_SEEDS,
    WIDE_TUNING_POOL_SEEDS,
    generate_profile,
    tuning_profiles,
)
from edgellm.sim.scorecard import score
from edgellm.sim.simulate import comfort_limit
from edgellm.sim.situations import low_headroom_profile

WARM_ROOM_C = (26.0, 31.0)
WARM_IDLE_MARGIN_C = (2.0, 4.5)  # comfort limit − idle skin


def warm_pool_seeds() -> tuple[int, ...]:
    """The warm two-cluster pool: a warm room, little + big, the idle skin 2-4.5 °C under the limit."""
    assert not set(WARM_POOL_CANDIDATE_SEEDS) & HELD_OUT_ANY  # never a held-out phone
    out = []
    for seed in WARM_POOL_CANDIDATE_SEEDS:
        p = generate_profile(seed, purpose="tuning")
        idle = p.ambient_c + p.static_power_w * p.skin_to_ambient_resistance_k_per_w
        margin = comfort_limit(p) - idle
        warm = WARM_ROOM_C[0] <= p.ambient_c <= WARM_ROOM_C[1] and len(p.clusters) == 2
        if warm and WARM_IDLE_MARGIN_C[0] <= margin <= WARM_IDLE_MARGIN_C[1]:
            out.append(seed)
    return tuple(out)


Job = tuple[str, int, int, bool, float, float, float, float | None, float]


def card(job: Job) -> dict[str, Any]:
    """One pool phone's row (kind, seed, its index in the pool, revised probe, cold shift and its ramp,
    the resumed hold's shortest fit, the settled paced probe's distance under the aim)."""
    kind, seed, index, revised, shift, after_s, over_s, resumed_fit_s, under_c = job
    if kind in ("ordinary", "warm"):
        (profile,) = tuning_profiles((seed,))
    else:  # the stratum (thin, warm) alternates through the pool, as in the 24-phone sets
        profile = low_headroom_profile(seed, thin=index % 2 == 0, purpose="tuning")
    config = GovernorConfig(
        revised_probe=revised, resumed_min_fit_s=resumed_fit_s, pace_settled_under_c=under_c
    )
    identify = replace(
        config.identify,
        cold_start_shift_k=shift,
        cold_start_shift_after_s=after_s,
        cold_start_shift_over_s=over_s,
    )
    config = replace(config, identify=identify)
    sc, _ = score(profile, 30.0, config)
    passed = sc.comfort_passed if kind == "low-headroom" else sc.passed
    return {"set": kind, **sc.row(), "pool_passed": passed}


def _fit_s(text: str) -> float | None:
    """--resumed-min-fit: seconds, or 'none' for the old rule (GovernorConfig.resumed_min_fit_s = None)."""
    return None if text.strip().lower() == "none" else float(text)


def _name(job: Job) -> str:
    return f"lowheadroom-{job[1]}" if job[0] == "low-headroom" else f"gen-{job[1]}"


def main() -> int:
    """Score the pool; print each miss and a summary per set; exit 0 (the pool is for finding misses)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--revised-probe",
        action=argparse.BooleanOptionalAction,
        default=GovernorConfig().revised_probe,
        help="GovernorConfig.revised_probe (default on since issue 30's fourth pass)",
    )
    ap.add_argument(
        "--cold-shift",
        type=float,
        default=GovernorConfig().identify.cold_start_shift_k,
        help="IdentifyConfig.cold_start_shift_k, K (0: a cold start's ambient prior on its first reading)",
    )
    ap.add_argument(
        "--cold-shift-after",
        type=float,
        default=GovernorConfig().identify.cold_start_shift_after_s,
        help="IdentifyConfig.cold_start_shift_after_s: the shift enters after this many seconds ...",
    )
    ap.add_argument(
        "--cold-shift-over",
        type=float,
        default=GovernorConfig().identify.cold_start_shift_over_s,
        help="... over this many (IdentifyConfig.cold_start_shift_over_s; 0 and 0: at the first reading)",
    )
    ap.add_argument(
        "--resumed-min-fit",
        type=_fit_s,
        default=GovernorConfig().resumed_min_fit_s,
        help="GovernorConfig.resumed_min_fit_s: a resumed hold cut short keeps a fit this long (s; default "
        "14; 'none': the old rule, the probe's 20 s fit, under which the rung is given up)",
    )
    ap.add_argument(
        "--pace-settled-under",
        type=float,
        default=GovernorConfig().pace_settled_under_c,
        help="GovernorConfig.pace_settled_under_c: the paced probe also starts this far under the aim (K)",
    )
    ap.add_argument("--wide", action="store_true", help="also seeds 3001-3300 and 4001-4300")
    ap.add_argument("--warm", action="store_true", help="also the warm two-cluster pool (seeds 20001-60000)")
    ap.add_argument("--warm-only", action="store_true", help="score the warm pool alone")
    ap.add_argument("--only", default="", help="comma-separated profile names: score just these pool phones")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="")
    ns = ap.parse_args()
    ordinary = TUNING_POOL_SEEDS + (WIDE_TUNING_POOL_SEEDS if ns.wide else ())
    low = LOW_HEADROOM_TUNING_POOL_SEEDS + (LOW_HEADROOM_WIDE_POOL_SEEDS if ns.wide else ())
    if ns.warm_only:
        ordinary, low = (), ()
    on = (
        ns.revised_probe,
        ns.cold_shift,
        ns.cold_shift_after,
        ns.cold_shift_over,
        ns.resumed_min_fit,
        ns.pace_settled_under,
    )
    jobs = [("ordinary", s, k, *on) for k, s in enumerate(ordinary)]
    jobs += [("low-headroom", s, k, *on) for k, s in enumerate(low)]
    if ns.warm or ns.warm_only:
        jobs += [("warm", s, k, *on) for k, s in enumerate(warm_pool_seeds())]
    if ns.only:
        names = set(ns.only.split(","))
        jobs = [j for j in jobs if _name(j) in names]
    with ProcessPoolExecutor(ns.jobs) as pool:
        rows = list(pool.map(card, jobs, chunksize=4))
    if ns.out:
        Path(ns.out).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    for r in rows:
        if not r["pool_passed"]:
            sys.stdout.write(
                f"MISS {r['set']} {r['profile']}: ratio {r['ratio']}, throttled {r['throttled_s']} s, "
                f"{r['over_trip_c']:+} °C over trip, {r['over_comfort_c']:+} °C over comfort, "
                f"ripple {r['ripple']} (oracle: {r['oracle_actuation']})\n"
            )
    for kind in ("ordinary", "low-headroom", "warm"):
        mine = [r for r in rows if r["set"] == kind]
        if not mine:  # --only named none of this set
            continue
        ratios = [r["ratio"] for r in mine]
        summary = {
            "set": kind,
            "phones": len(mine),
            "missed": sum(not r["pool_passed"] for r in mine),
            "worst_ratio": min(ratios),
            "median_ratio": statistics.median(ratios),
            "max_ripple": max(r["ripple"] for r in mine),
        }
        sys.stdout.write(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
