"""Tune the governor's settings on the shipped profiles and the tuning sets — never a held-out set.

Phones come only from `tuning_profiles()` and `low_headroom_tuning_profiles()` (both refuse
held-out seeds) and the shipped JSON profiles. Each candidate setting is scored on every one of
them: failing bars first (held-out bars on generated phones, the comfort bars on low-headroom
ones; ≥ 1.2× unmanaged, no throttling and ≤ 10% decay on shipped ones), then the worst and the
median ratio to the oracle. Usage:
    python bench/tune_governor.py [--minutes 30] [--grid 'ki_gap=0.015,0.03;probe_hold_s=30,40']
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from dataclasses import replace
from typing import Any

from edgellm.device.governor.controller import GovernorConfig
from edgellm.sim.generator import tuning_profiles
from edgellm.sim.profile import list_profiles, load_profile
from edgellm.sim.scorecard import score
from edgellm.sim.simulate import simulate
from edgellm.sim.situations import low_headroom_tuning_profiles

DEFAULT_GRID = "ki_gap=0.015,0.03;probe_hold_s=30,40;idle_learn_s=120,300;kp_over_c=2,3"


def parse_grid(text: str) -> list[dict[str, float]]:
    """'a=1,2;b=3' -> [{a: 1, b: 3}, {a: 2, b: 3}]."""
    axes = []
    for part in filter(None, text.split(";")):
        key, values = part.split("=")
        axes.append([(key.strip(), float(v)) for v in values.split(",")])
    return [dict(combo) for combo in itertools.product(*axes)]


def evaluate(cfg: GovernorConfig, minutes: float) -> dict[str, Any]:
    """Failing bars and oracle ratios over the shipped profiles and the tuning set."""
    fails, ratios = 0, []
    for name in list_profiles():
        prof = load_profile(name)
        card, on = score(prof, minutes, cfg)
        off = simulate(prof, minutes, governor=False, config=cfg)
        ok = (
            on.mean_tokens_per_second >= 1.2 * off.mean_tokens_per_second
            and on.throttled_seconds == 0
            and on.decay_10min is not None
            and on.decay_10min <= 0.10
        )
        fails += not ok
        ratios.append(card.ratio)
    for prof in tuning_profiles():
        card, _ = score(prof, minutes, cfg)
        fails += not card.passed
        ratios.append(card.ratio)
    for prof in low_headroom_tuning_profiles():
        card, _ = score(prof, minutes, cfg)
        fails += not card.comfort_passed
        ratios.append(card.ratio)
    return {"fails": fails, "min_ratio": min(ratios), "median_ratio": statistics.median(ratios)}


def main() -> int:
    """Score every grid point; print them best first."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--grid", default=DEFAULT_GRID)
    ns = ap.parse_args()
    base = GovernorConfig()
    results = []
    for point in parse_grid(ns.grid):
        cfg = replace(base, **point)  # type: ignore[arg-type]
        results.append({"settings": point, **evaluate(cfg, ns.minutes)})
        sys.stderr.write(json.dumps(results[-1]) + "\n")
    results.sort(key=lambda r: (r["fails"], -r["min_ratio"], -r["median_ratio"]))
    sys.stdout.write(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
