"""`edgellm simulate`: the virtual phone on a simulated clock, with the real governor on or off."""

from __future__ import annotations

import argparse
import json
import sys

from edgellm.common.argtypes import float_in


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `simulate` subcommand."""
    p = sub.add_parser("simulate", help="run the virtual phone on a simulated clock (governor on/off)")
    p.add_argument("--profile", default="sd8gen3", help="shipped profile name or a JSON file")
    p.add_argument(
        "--minutes", type=float_in(0.01), default=30.0, help="simulated minutes of continuous generation"
    )
    p.add_argument(
        "--governor",
        choices=("on", "off"),
        default="on",
        help="run the thermal governor, or the phone unmanaged",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--list", action="store_true", help="list the shipped profiles and exit")
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Simulate and print the figures."""
    from edgellm.device.virtual_phone.profile import list_profiles, load_profile
    from edgellm.device.virtual_phone.simulate import simulate

    if ns.list:
        sys.stdout.write("\n".join(list_profiles()) + "\n")
        return 0
    if ns.minutes <= 0:
        sys.stderr.write("edgellm: --minutes must be positive\n")
        return 2
    try:
        profile = load_profile(ns.profile)
    except (FileNotFoundError, ValueError, KeyError) as err:
        sys.stderr.write(f"edgellm: {err}\n")
        return 2
    result = simulate(profile, ns.minutes, governor=ns.governor == "on")
    summary = result.summary()
    if ns.json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return 0
    for key, value in summary.items():
        if key != "tokens_per_second_by_minute":
            sys.stdout.write(f"{key:24} {value}\n")
    return 0
