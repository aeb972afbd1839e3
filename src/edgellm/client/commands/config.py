"""`edgellm config get|set`: read or change the daemon's threads, governor or KV window at runtime."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from edgellm.client.connect_args import add_target, client_from
from edgellm.common.errors import InvalidArgument
from edgellm.v1 import device_pb2

# key -> (UpdateConfigRequest field, parser)
KEYS: dict[str, tuple[str, type]] = {
    "threads": ("threads", int),
    "policy": ("governor_policy", str),
    "governor": ("governor_policy", str),
    "setpoint": ("setpoint_c", float),
    "setpoint_c": ("setpoint_c", float),
    "pacing_ms": ("pacing_ms", float),
    "pacing": ("pacing_ms", float),
    "power": ("power", str),
    "cluster": ("cluster", str),
    "thermal_policy": ("thermal_policy", str),
    "kv_window": ("kv_window", int),
    "n_keep": ("n_keep", int),
}
# What `config get` prints, in this order (the canonical key names of KEYS, plus the rung).
SETTINGS = (
    "threads",
    "kv_window",
    "n_keep",
    "policy",
    "thermal_policy",
    "setpoint_c",
    "cluster",
    "rung",
    "power",
    "pacing_ms",
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `config` subcommand."""
    p = sub.add_parser("config", help="read (get) or change (set) daemon settings at runtime")
    add_target(p)
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    s = verbs.add_parser("set", help=f"KEY=VALUE ... with KEY in {', '.join(sorted(KEYS))}")
    add_target(s, nested=True)
    s.add_argument("pairs", nargs="+", metavar="KEY=VALUE", help="settings to change (UpdateConfig)")
    s.set_defaults(handler=run_set)
    g = verbs.add_parser("get", help=f"print settings: all, or the KEYs given ({', '.join(SETTINGS)})")
    add_target(g, nested=True)
    g.add_argument("keys", nargs="*", metavar="KEY", help="settings to print (default: all)")
    g.add_argument("--json", action="store_true", help="print a JSON object")
    g.set_defaults(handler=run_get)


def parse_pairs(pairs: list[str]) -> device_pb2.UpdateConfigRequest:
    """UpdateConfigRequest from KEY=VALUE strings (InvalidArgument on a bad key or value)."""
    req = device_pb2.UpdateConfigRequest()
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in KEYS:
            raise InvalidArgument(f"expected KEY=VALUE with KEY in {', '.join(sorted(KEYS))}, got {pair!r}")
        field, kind = KEYS[key]
        try:
            setattr(req, field, kind(value))
        except ValueError:
            raise InvalidArgument(
                f"{key} takes {'an integer' if kind is int else 'a number'}, got {value!r}"
            ) from None
    return req


def settings(st: device_pb2.DaemonStatus) -> dict[str, Any]:
    """The runtime settings from a DaemonStatus, by `config set` key."""
    g = st.governor
    return {
        "threads": st.threads,
        "kv_window": st.kv_window,
        "n_keep": st.n_keep,
        "policy": g.policy,
        "thermal_policy": g.thermal_policy,
        "setpoint_c": round(g.setpoint_c, 2),
        "cluster": g.cluster,
        "rung": g.rung,
        "power": g.power,
        "pacing_ms": round(g.pacing_ms, 2),
    }


def _line(values: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items())


def run_set(ns: argparse.Namespace) -> int:
    """Send the update and print the resulting settings."""
    req = parse_pairs(ns.pairs)
    with client_from(ns, timeout=120.0) as client:  # a thread change reloads the model
        st = client.stub.UpdateConfig(req, timeout=120.0)
    sys.stdout.write(_line(settings(st)) + "\n")
    return 0


def run_get(ns: argparse.Namespace) -> int:
    """Print the daemon's current settings (GetStatus)."""
    aliases = {
        k: dict(setpoint="setpoint_c", pacing="pacing_ms", governor="policy").get(k, k) for k in ns.keys
    }
    unknown = [k for k, v in aliases.items() if v not in SETTINGS]
    if unknown:
        raise InvalidArgument(f"unknown setting {unknown[0]!r}: choose from {', '.join(SETTINGS)}")
    with client_from(ns, timeout=10.0) as client:
        values = settings(client.status())
    if aliases:
        values = {v: values[v] for v in aliases.values()}
    if ns.json:
        sys.stdout.write(json.dumps(values) + "\n")
    elif len(ns.keys) == 1:
        sys.stdout.write(f"{values[aliases[ns.keys[0]]]}\n")
    else:
        sys.stdout.write("\n".join(f"{k:<11} {v}" for k, v in values.items()) + "\n")
    return 0
