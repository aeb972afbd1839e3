"""`edgellm deploy device --gateway`: the OpenAI gateway as a second runit service beside the daemon.

The installer (`install.sh --gateway`) pip-installs the pure-Python `[gateway]` extra, makes the
gateway's API key in Termux (0600) and installs the service `edgellm-gateway`
(termux/gateway/run). Here: start that service, forward its port to the host, wait for its
`/health`, and say where the key is. The key stays on the phone: the deploy prints how to read it.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from edgellm.common.logs import get_logger
from edgellm.deploy.adb import DeployError
from edgellm.deploy.channel import HOME, PREFIX, Channel
from edgellm.deploy.flow import DeployState, Step, runit_step, service_running

log = get_logger(__name__)

GATEWAY_SERVICE = "edgellm-gateway"
GATEWAY_PORT = 8080  # on the phone's loopback (termux/gateway/run); the host forwards to it
GATEWAY_KEY_PATH = f"{HOME}/.config/edgellm/gateway-key"  # made by install.sh --gateway, 0600
GATEWAY_LOG = f"{PREFIX}/var/log/sv/{GATEWAY_SERVICE}/current"


def gateway_running(channel: Channel) -> bool:
    """True when `sv status edgellm-gateway` says the gateway runs."""
    return service_running(channel, GATEWAY_SERVICE)


def gateway_status(channel: Channel) -> str:
    """`sv status edgellm-gateway`, or "not installed" (deployed without --gateway)."""
    out = channel.run(f"sv status {GATEWAY_SERVICE}").stdout.strip()
    return out if out.startswith(("run:", "down:")) else "not installed"


def gateway_service_step(channel: Channel, state: DeployState) -> Step:
    """Enable and start the gateway's runit service, restarting it when this run upgraded anything."""
    description = (
        f"start (or restart after an upgrade) the runit service `{GATEWAY_SERVICE}` "
        f"(127.0.0.1:{GATEWAY_PORT} on the phone)"
    )
    return runit_step(channel, state, GATEWAY_SERVICE, "gateway", description)


def wait_gateway(base: str, timeout: float, want_model: bool) -> str:
    """Poll BASE/health (no key: the route is open) until the gateway answers; with want_model,
    until it says a model is loaded. Returns its one-line state.

    Only the state is read: nothing secret is sent, so a squatter on the port learns nothing.
    """
    deadline = time.monotonic() + timeout
    last = "UNREACHABLE"
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5) as reply:
                body = json.loads(reply.read())
            return f"ready, model {body.get('model', '?')}"
        except urllib.error.HTTPError as err:  # 503 while no model is loaded (or the daemon is away)
            last = f"HTTP {err.code}: {_message(err.read())}"
            if err.code == 503 and not want_model:
                return f"up, {last}"
        except (urllib.error.URLError, OSError) as err:
            last = f"UNREACHABLE ({err})"
        log.debug("gateway_health_wait", base=base, state=last)
        if time.monotonic() > deadline:
            raise DeployError(
                f"the gateway at {base} is {last} after {timeout:.0f} s; its log on the phone: "
                f"{GATEWAY_LOG} (`sv status {GATEWAY_SERVICE}` in Termux)"
            )
        time.sleep(0.5)


def _message(raw: bytes) -> str:
    """The message of an OpenAI-shaped error body, else the raw text (cut)."""
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace")[:200]


def key_lines(read_command: str, local_port: int) -> list[str]:
    """Where the gateway's key is and how to read it: printed, never copied off the phone."""
    return [
        f"gateway: OpenAI base URL http://127.0.0.1:{GATEWAY_PORT}/v1 on the phone, "
        f"http://127.0.0.1:{local_port}/v1 here (adb forward)",
        f"gateway API key: on the phone in {GATEWAY_KEY_PATH} (0600; not copied here). Read it with:",
        f"  {read_command}",
        "  clients send it as the bearer token (OpenAI SDK: api_key=<its contents>); docs/deploy.md",
    ]


def read_key_command(channel_name: str, serial: str, ssh_port: int, ssh_key: Path) -> str:
    """The host command that prints the key, over the channel the deploy used (run-as or ssh)."""
    if channel_name == "run-as":
        return f"adb -s {serial} shell run-as com.termux cat {GATEWAY_KEY_PATH}"
    return f"ssh -p {ssh_port} -i {ssh_key} 127.0.0.1 cat {GATEWAY_KEY_PATH}"
