"""`edgellm simulate`: the virtual phone on a simulated clock, under the governor, unmanaged or pinned."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING

from edgellm.common.argtypes import float_in

if TYPE_CHECKING:
    from edgellm.sim.profile import PhoneProfile


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `simulate` subcommand."""
    p = sub.add_parser("simulate", help="run the virtual phone on a simulated clock (governor on/off/pinned)")
    p.add_argument(
        "--profile",
        default="sd8gen3",
        help="shipped profile, a JSON file, or a generated phone gen-SEED / held-out-SEED (default sd8gen3)",
    )
    p.add_argument(
        "--minutes", type=float_in(0.01), default=30.0, help="simulated minutes of continuous generation"
    )
    p.add_argument(
        "--governor", choices=("on", "off"), default=None, help="shorthand for --policy thermal|off"
    )
    p.add_argument(
        "--policy",
        choices=("thermal", "off", "pinned"),
        default=None,
        help="thermal: the governor (default); off: unmanaged; pinned: one rung held (--rung)",
    )
    p.add_argument(
        "--rung", type=int, default=None, help="with --policy pinned: the ladder rung to hold (0 = fastest)"
    )
    p.add_argument(
        "--oracle",
        action="store_true",
        help="also run the oracle: the best fixed operating point under the same comfort limit",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--list", action="store_true", help="list the shipped profiles and exit")
    p.set_defaults(handler=run)


def _profile(name: str) -> PhoneProfile:
    from edgellm.sim.generator import generate_profile
    from edgellm.sim.profile import load_profile

    m = re.fullmatch(r"(?:gen|held-out)-(\d+)", name)
    return generate_profile(int(m.group(1))) if m else load_profile(name)


def run(ns: argparse.Namespace) -> int:
    """Simulate and print the figures."""
    from edgellm.sim.oracle import oracle
    from edgellm.sim.profile import list_profiles
    from edgellm.sim.simulate import phone_ladder, simulate

    if ns.list:
        sys.stdout.write("\n".join(list_profiles()) + "\n")
        return 0
    if ns.minutes <= 0:
        sys.stderr.write("edgellm: --minutes must be positive\n")
        return 2
    policy = ns.policy or {"on": "thermal", "off": "off", None: "thermal"}[ns.governor]
    if (
        ns.policy is not None
        and ns.governor is not None
        and {"on": "thermal", "off": "off"}[ns.governor] != policy
    ):
        sys.stderr.write(f"edgellm: --governor {ns.governor} contradicts --policy {policy}\n")
        return 2
    if (ns.rung is not None) != (policy == "pinned"):
        sys.stderr.write("edgellm: --policy pinned needs --rung K, and --rung needs --policy pinned\n")
        return 2
    try:
        profile = _profile(ns.profile)
    except (FileNotFoundError, ValueError, KeyError) as err:
        sys.stderr.write(f"edgellm: {err}\n")
        return 2
    pinned = None
    if policy == "pinned":
        ladder = phone_ladder(profile)
        if not 0 <= ns.rung < len(ladder):
            rungs = ", ".join(f"{i}: {r.describe()}" for i, r in enumerate(ladder))
            sys.stderr.write(
                f"edgellm: --rung must be within 0..{len(ladder) - 1} on {profile.name} ({rungs})\n"
            )
            return 2
        pinned = ladder[ns.rung]
    result = simulate(profile, ns.minutes, governor=policy == "thermal", pinned=pinned)
    summary = result.summary()
    if ns.oracle:
        best = oracle(profile, ns.minutes)
        summary["oracle_mean_tokens_per_second"] = round(best.mean_tokens_per_second, 3)
        summary["oracle_actuation"] = best.actuation.describe()
        summary["oracle_ratio"] = (
            round(result.mean_tokens_per_second / best.mean_tokens_per_second, 3)
            if best.mean_tokens_per_second > 0
            else None
        )
    if ns.json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return 0
    for key, value in summary.items():
        if key != "tokens_per_second_by_minute":
            sys.stdout.write(f"{key:30} {value}\n")
    return 0
