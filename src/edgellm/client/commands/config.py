"""`edgellm config set KEY=VALUE ...`: change the daemon's threads, governor or KV window at runtime."""

from __future__ import annotations

import argparse
import sys

import grpc

from edgellm.client.commands.common_args import add_target, client_from, report_rpc_error
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
    "kv_window": ("kv_window", int),
    "n_keep": ("n_keep", int),
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `config` subcommand."""
    p = sub.add_parser("config", help="change daemon settings at runtime (UpdateConfig)")
    add_target(p)
    verbs = p.add_subparsers(dest="verb", required=True)
    s = verbs.add_parser("set", help=f"KEY=VALUE ... with KEY in {', '.join(sorted(KEYS))}")
    s.add_argument("pairs", nargs="+", metavar="KEY=VALUE")
    p.set_defaults(handler=run)


def parse_pairs(pairs: list[str]) -> device_pb2.UpdateConfigRequest:
    """UpdateConfigRequest from KEY=VALUE strings (ValueError on a bad key or value)."""
    req = device_pb2.UpdateConfigRequest()
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in KEYS:
            raise ValueError(f"expected KEY=VALUE with KEY in {', '.join(sorted(KEYS))}, got {pair!r}")
        field, kind = KEYS[key]
        setattr(req, field, kind(value))
    return req


def run(ns: argparse.Namespace) -> int:
    """Send the update and print the resulting governor state."""
    try:
        req = parse_pairs(ns.pairs)
    except ValueError as err:
        sys.stderr.write(f"edgellm: {err}\n")
        return 2
    try:
        with client_from(ns, timeout=120.0) as client:
            st = client.stub.UpdateConfig(req, timeout=120.0)
    except grpc.RpcError as err:
        return report_rpc_error(err)
    g = st.governor
    sys.stdout.write(
        f"threads={st.threads} kv_window={st.kv_window} n_keep={st.n_keep} policy={g.policy} "
        f"setpoint={g.setpoint_c:.1f} cluster={g.cluster} power={g.power}\n"
    )
    return 0
