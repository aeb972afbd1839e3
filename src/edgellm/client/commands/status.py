"""`edgellm status`: the daemon's model and state."""

from __future__ import annotations

import argparse
import sys
import time

from edgellm.client.connect_args import add_target, client_from
from edgellm.client.jsonout import message_json
from edgellm.v1 import device_pb2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `status` subcommand."""
    p = sub.add_parser("status", help="show the daemon's model and state")
    add_target(p)
    p.add_argument("--json", action="store_true", help="print the whole status as JSON (snake_case)")
    p.set_defaults(handler=run)


def governor_lines(g: device_pb2.GovernorState) -> list[str]:
    """The governor: policy, comfort limit, mode, and which actuators and sensors are live."""
    head = f"governor {g.policy}  comfort {g.setpoint_c:.1f} °C"
    if g.thermal_policy:  # unset: a daemon from before the policies
        head += f"  policy {g.thermal_policy}"
    if g.mode:
        head += f"  mode {g.mode}"
    if g.HasField("thermal_headroom"):
        head += f"  headroom {g.thermal_headroom:.2f}"
    lines = [head]
    if g.model_tau_s:
        lines.append(f"skin     tau {g.model_tau_s:.0f} s  ambient {g.model_ambient_c:.1f} °C (identified)")
    if g.frontier:
        lines.append(f"frontier {g.frontier}")
    capacity = capacity_line(g)
    if capacity:
        lines.append(capacity)
    for kind in ("actuator", "sensor"):
        for c in (c for c in g.capabilities if c.kind == kind):
            lines.append(f"  {kind:8} {c.name:22} {'live' if c.live else 'off ':4}  {c.detail}")
    return lines


CAPACITY_STATES = {
    device_pb2.CAPACITY_STATE_UNKNOWN: "not known yet",
    device_pb2.CAPACITY_STATE_AVAILABLE: "available",
    device_pb2.CAPACITY_STATE_THERMAL_HEADROOM_EXHAUSTED: "thermal headroom exhausted",
}


def capacity_line(g: device_pb2.GovernorState) -> str:
    """What the phone sustains under its comfort limit, e.g.
    'capacity 0.00 tok/s sustainable (idle over the limit; floor 1.00)  thermal headroom exhausted:
    refusing generations, retry after 9 s'; empty from a daemon that does not estimate it."""
    state = CAPACITY_STATES.get(g.capacity_state)
    if state is None:
        return ""
    floor = f"floor {g.capacity_floor_tokens_per_second:.2f}"
    if g.HasField("capacity_tokens_per_second"):
        how = f"{g.capacity_basis}; " if g.capacity_basis else ""
        rate = f"{g.capacity_tokens_per_second:.2f} tok/s sustainable ({how}{floor})"
    else:
        rate = f"? tok/s ({floor})"
    line = f"capacity {rate}  {state}"
    if g.refusing_generations:
        line += f": refusing generations, retry after {g.capacity_retry_after_s} s"
    return line


def age(seconds: float) -> str:
    """A duration as a person reads it: '40 s', '12 min', '5 h', '3 d'."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}"
    return f"{max(seconds, 0):.0f} s"


def tuning(t: device_pb2.ThreadTuning, now: float | None = None) -> str:
    """How the thread count was chosen and when, e.g.
    'autotuned 2 (decode 1: 41.8 tok/s, 2: 68.0 tok/s; 9.1 s; measured 3 h ago)'."""
    if not t.trials:
        head = f"{t.threads} (pinned)" if t.pinned else str(t.threads)
        return head + (f"; re-check due: {t.recheck}" if t.recheck else "")
    trials = ", ".join(
        f"{x.threads}: {x.decode_tokens_per_second:.1f} tok/s" + (" (contended)" if x.contended else "")
        for x in t.trials
    )
    how = "pinned" if t.pinned else "autotuned"
    when = _when_measured(t, time.time() if now is None else now)
    line = f"{how} {t.threads} (decode {trials}; {when})"
    if any(x.contended and x.threads != t.threads for x in t.trials):  # a loser: the pick in doubt
        line += "; not cached: contended"
    return line + (f"; re-check due at the next idle moment: {t.recheck}" if t.recheck else "")


def _when_measured(t: device_pb2.ThreadTuning, now: float) -> str:
    """How long the autotune took, whether at an earlier start, and how long ago."""
    when = f"measured at an earlier start in {t.seconds:.1f} s" if t.cached else f"{t.seconds:.1f} s"
    if t.measured_unix > 0:
        when += f"; measured {age(now - t.measured_unix)} ago"
    return when


def run(ns: argparse.Namespace) -> int:
    """Print the status."""
    with client_from(ns, timeout=10.0) as client:
        st = client.status()
    if ns.json:
        sys.stdout.write(message_json(st) + "\n")
        return 0
    state = str(device_pb2.EngineState.Name(st.engine_state)).removeprefix("ENGINE_STATE_").lower()
    model = (
        f"{st.model.name} ({st.model.quantization}, {st.model.artifact_id[:12]})"
        if st.HasField("model")
        else "none"
    )
    lines = [
        f"daemon   {client.target}  v{st.version}  up {st.uptime_seconds:.0f} s",
        f"model    {model}",
        f"engine   {state}  threads={st.threads}  context={st.context_tokens}",
        f"queue    {st.queue_depth}/{st.queue_capacity}  served={st.requests_served}",
    ]
    if st.load_ms:
        lines.append(f"load     {st.load_ms:.0f} ms  warm-up {st.warmup_ms:.0f} ms")
    lines += governor_lines(st.governor)
    lines.append(f"threads  {tuning(st.thread_tuning)}")
    if st.draft_tokens_total:
        rate = st.accepted_draft_tokens_total / st.draft_tokens_total
        lines.append(
            f"drafts   {st.accepted_draft_tokens_total}/{st.draft_tokens_total} accepted ({rate:.0%})"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
