"""`edgellm simulate`: the virtual phone on a simulated clock, under the governor, unmanaged or pinned."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING

from edgellm.common.argtypes import float_in

if TYPE_CHECKING:
    from edgellm.device.governor.actuation import Actuation
    from edgellm.sim.profile import PhoneProfile


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `simulate` subcommand."""
    p = sub.add_parser("simulate", help="run the virtual phone on a simulated clock (governor on/off/pinned)")
    p.add_argument(
        "--profile",
        default="sd8gen3",
        help="shipped profile, a JSON file, or a generated phone gen-SEED / held-out-SEED / "
        "lowheadroom-SEED / lowheadroom-held-out-SEED (default sd8gen3)",
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
    """A shipped profile, a JSON file, or a generated phone (gen-, held-out-, lowheadroom[-held-out]-SEED)."""
    from edgellm.sim.generator import generate_profile
    from edgellm.sim.profile import load_profile
    from edgellm.sim.situations import low_headroom_by_seed

    m = re.fullmatch(r"(?:gen|held-out)-(\d+)", name)
    hot = re.fullmatch(r"lowheadroom(?:-held-out)?-(\d+)", name)
    try:
        if hot:
            return low_headroom_by_seed(int(hot.group(1)))
        return generate_profile(int(m.group(1))) if m else load_profile(name)
    except (FileNotFoundError, ValueError, KeyError) as err:
        raise _Refused(str(err)) from err


def run(ns: argparse.Namespace) -> int:
    """Simulate and print the figures."""
    from edgellm.sim.profile import list_profiles
    from edgellm.sim.simulate import simulate

    if ns.list:
        sys.stdout.write("\n".join(list_profiles()) + "\n")
        return 0
    try:
        policy = _policy(ns)
        profile = _profile(ns.profile)
        pinned = _pinned_rung(profile, ns.rung) if policy == "pinned" else None
    except _Refused as err:
        sys.stderr.write(f"edgellm: {err}\n")
        return 2
    result = simulate(profile, ns.minutes, governor=policy == "thermal", pinned=pinned)
    summary = result.summary()
    if ns.oracle:
        summary.update(_oracle(profile, ns.minutes, result.mean_tokens_per_second))
    if ns.json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return 0
    for key, value in summary.items():
        if key != "tokens_per_second_by_minute":
            sys.stdout.write(f"{key:30} {value}\n")
    return 0


class _Refused(Exception):
    """A bad combination of options: the message goes to stderr and the command exits 2."""


def _policy(ns: argparse.Namespace) -> str:
    """thermal, off or pinned, from --policy and its --governor shorthand, once the options agree."""
    if ns.minutes <= 0:
        raise _Refused("--minutes must be positive")
    shorthand = {"on": "thermal", "off": "off", None: None}[ns.governor]
    policy: str = ns.policy or shorthand or "thermal"
    if ns.policy is not None and shorthand is not None and shorthand != policy:
        raise _Refused(f"--governor {ns.governor} contradicts --policy {policy}")
    if (ns.rung is not None) != (policy == "pinned"):
        raise _Refused("--policy pinned needs --rung K, and --rung needs --policy pinned")
    return policy


def _pinned_rung(profile: PhoneProfile, rung: int) -> Actuation:
    """The ladder rung --rung names on this phone."""
    from edgellm.sim.simulate import phone_ladder

    ladder = phone_ladder(profile)
    if not 0 <= rung < len(ladder):
        rungs = ", ".join(f"{i}: {r.describe()}" for i, r in enumerate(ladder))
        raise _Refused(f"--rung must be within 0..{len(ladder) - 1} on {profile.name} ({rungs})")
    return ladder[rung]


def _oracle(profile: PhoneProfile, minutes: float, mean_tokens_per_second: float) -> dict[str, object]:
    """The oracle's figures, and the run's speed as a share of the oracle's."""
    from edgellm.sim.oracle import oracle

    best = oracle(profile, minutes)
    best_tps = best.mean_tokens_per_second
    return {
        "oracle_mean_tokens_per_second": round(best_tps, 3),
        "oracle_actuation": best.actuation.describe(),
        "oracle_ratio": round(mean_tokens_per_second / best_tps, 3) if best_tps > 0 else None,
    }
