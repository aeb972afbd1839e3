"""`edgellm status`: the daemon's model and state."""

from __future__ import annotations

import argparse
import sys

from edgellm.client.client import DaemonClient
from edgellm.client.commands.common_args import add_target
from edgellm.client.jsonout import message_json
from edgellm.v1 import device_pb2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `status` subcommand."""
    p = sub.add_parser("status", help="show the daemon's model and state")
    add_target(p)
    p.add_argument("--json", action="store_true", help="print the whole status as JSON (snake_case)")
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Print the status."""
    with DaemonClient(ns.target, timeout=10.0) as client:
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
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
