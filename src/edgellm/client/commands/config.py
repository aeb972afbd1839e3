"""`edgellm config get|set|reset`: read or change the daemon's threads, governor or KV window at runtime.

`set` is saved by the daemon for its restarts; `reset` forgets what was saved and puts back the
values the daemon started with (its command line's, else the defaults), saying what changed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from edgellm.client.connect_args import add_target, client_from
from edgellm.common.argtypes import float_in, int_in
from edgellm.common.errors import InvalidArgument
from edgellm.engine.kv_window import MIN_WINDOW
from edgellm.v1 import device_pb2


@dataclass(frozen=True)
class Key:
    """A `config set` key: the UpdateConfigRequest field it sets and how its value is read."""

    field: str
    parse: Callable[[str], Any]
    note: str = ""  # what the value means, added to a refusal


def _choice(*names: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in names:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(names)}, got {text!r}")
        return text

    return parse


def _window(text: str) -> int:
    value = int_in(-(2**31))(text)  # any integer; the window's own bounds follow
    if value != 0 and value < MIN_WINDOW:
        raise argparse.ArgumentTypeError(f"must be 0 or at least {MIN_WINDOW}, got {value}")
    return value


# The daemon checks ranges it alone knows (a window's minimum, the setpoint's band, the clusters);
# the client refuses what cannot even be sent (a negative count in a uint32 field) and names the
# key the user typed, not the wire field (`policy`, not `governor_policy`).
_POLICY = Key("governor_policy", _choice("thermal", "off", "pinned"))
_SETPOINT = Key("setpoint_c", float_in(-273.0), "°C")
_PACING = Key("pacing_ms", float_in(0.0), "ms slept between decode steps")
KEYS: dict[str, Key] = {
    "threads": Key("threads", int_in(1), "engine threads"),
    "policy": _POLICY,
    "governor": _POLICY,
    "setpoint": _SETPOINT,
    "setpoint_c": _SETPOINT,
    "pacing_ms": _PACING,
    "pacing": _PACING,
    "power": Key("power", _choice("high", "normal", "low")),
    "cluster": Key("cluster", str),
    "thermal_policy": Key("thermal_policy", _choice("comfort", "throughput")),
    "kv_window": Key("kv_window", _window, "tokens in a sliding KV window; 0 = no window"),
    "n_keep": Key("n_keep", int_in(0), "prompt tokens a sliding window keeps"),
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
    r = verbs.add_parser(
        "reset",
        help="put back the settings the daemon started with (its command line's, else the defaults) "
        "and forget what `config set` saved",
    )
    add_target(r, nested=True)
    r.set_defaults(handler=run_reset)
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
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" (did you mean {close[0]}={value}?)" if sep and close else ""
            raise InvalidArgument(
                f"expected KEY=VALUE with KEY in {', '.join(sorted(KEYS))}, got {pair!r}{hint}"
            )
        spec = KEYS[key]
        try:
            setattr(req, spec.field, spec.parse(value))
        except (argparse.ArgumentTypeError, ValueError) as err:
            note = f" ({spec.note})" if spec.note else ""
            raise InvalidArgument(f"{key} {err}{note}".replace(f"{key} '", f"{key}: '")) from None
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
    sys.stderr.write(
        "saved: the daemon applies these again after a restart (settings.json in its data directory); "
        "`edgellm config reset` forgets them\n"
    )
    return 0


def run_reset(ns: argparse.Namespace) -> int:
    """Forget the saved settings and put back the startup ones now; say what changed and what could not."""
    with client_from(ns, timeout=120.0) as client:  # putting back a thread count reloads the model
        st = client.stub.UpdateConfig(device_pb2.UpdateConfigRequest(forget_saved=True), timeout=120.0)
    sys.stdout.write(_line(settings(st)) + "\n")
    sys.stderr.write(reset_report(st.restored))
    return 0


def reset_report(restored: Iterable[device_pb2.SettingRestore]) -> str:
    """What `config reset` tells the user: each setting put back, each one kept and why."""
    done = [f"{r.name} {r.was} -> {r.now}" for r in restored if not r.not_restored]
    kept = [f"{r.name} stays {r.was}: {r.not_restored}" for r in restored if r.not_restored]
    lines = [
        "put back the daemon's startup values (its command line's, else the defaults): " + ", ".join(done)
        if done
        else "the settings in force were already the daemon's startup values"
    ]
    lines += [f"not restored now: {k}" for k in kept]
    lines.append("forgot the saved settings: the daemon's next start uses its command line's too")
    return "\n".join(lines) + "\n"


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
