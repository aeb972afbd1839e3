"""The wide tuning pool: 100 ordinary and 100 low-headroom tuning phones, scored on the comfort bars.

Tuning on 24 phones per set let failure modes through that only a held-out set then showed (issue
30). This scores more phones drawn from the same generators with tuning seeds
(`TUNING_POOL_SEEDS` 1001-1100, `LOW_HEADROOM_TUNING_POOL_SEEDS` 2001-2100; never a held-out seed:
the generators refuse them for tuning) and lists each missed bar: ordinary phones every bar of the
tuning set (oracle ratio, throttling, comfort + 0.5 °C, ripple), low-headroom phones the comfort bars.
30 simulated minutes per phone (~0.4 s of CPU each). Usage:
    python bench/bench_tuning_pool.py [--[no-]revised-probe] [--wide] [--only gen-1057,...] [--jobs 2]
        [--out F.json]
--wide adds `WIDE_TUNING_POOL_SEEDS` 3001-3300 and `LOW_HEADROOM_WIDE_POOL_SEEDS` 4001-4300 (800 phones,
~3-5 min on 2 processes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from edgellm.device.governor.controller import GovernorConfig
from edgellm.sim.generator import (
    LOW_HEADROOM_TUNING_POOL_SEEDS,
    LOW_HEADROOM_WIDE_POOL_SEEDS,
    TUNING_POOL_SEEDS,
    WIDE_TUNING_POOL_SEEDS,
    tuning_profiles,
)
from edgellm.sim.scorecard import score
from edgellm.sim.situations import low_headroom_profile


def card(job: tuple[str, int, int, bool]) -> dict[str, Any]:
    """One pool phone's row (kind, seed, its index in the pool, revised probe)."""
    kind, seed, index, revised = job
    if kind == "ordinary":
        (profile,) = tuning_profiles((seed,))
    else:  # the stratum (thin, warm) alternates through the pool, as in the 24-phone sets
        profile = low_headroom_profile(seed, thin=index % 2 == 0, purpose="tuning")
    sc, _ = score(profile, 30.0, GovernorConfig(revised_probe=revised))
    passed = sc.passed if kind == "ordinary" else sc.comfort_passed
    return {"set": kind, **sc.row(), "pool_passed": passed}


def _name(job: tuple[str, int, int, bool]) -> str:
    return f"gen-{job[1]}" if job[0] == "ordinary" else f"lowheadroom-{job[1]}"


def main() -> int:
    """Score the pool; print each miss and a summary per set; exit 0 (the pool is for finding misses)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--revised-probe",
        action=argparse.BooleanOptionalAction,
        default=GovernorConfig().revised_probe,
        help="GovernorConfig.revised_probe (default on since issue 30's fourth pass)",
    )
    ap.add_argument("--wide", action="store_true", help="also seeds 3001-3300 and 4001-4300")
    ap.add_argument("--only", default="", help="comma-separated profile names: score just these pool phones")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="")
    ns = ap.parse_args()
    ordinary = TUNING_POOL_SEEDS + (WIDE_TUNING_POOL_SEEDS if ns.wide else ())
    low = LOW_HEADROOM_TUNING_POOL_SEEDS + (LOW_HEADROOM_WIDE_POOL_SEEDS if ns.wide else ())
    jobs = [("ordinary", s, k, ns.revised_probe) for k, s in enumerate(ordinary)]
    jobs += [("low-headroom", s, k, ns.revised_probe) for k, s in enumerate(low)]
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
    for kind in ("ordinary", "low-headroom"):
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
