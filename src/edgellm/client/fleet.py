"""A fleet of gateways behind LiteLLM's proxy: its config and Prometheus' scrape config, as data.

One LiteLLM deployment per gateway under one model name (the router's pool), plus one group per
phone (`MODEL@DEVICE`, for a client that wants that phone) that falls back to the pool. A gateway
that answers 503 (hot, daemon down) or 429 (busy) is cooled down for its Retry-After: LiteLLM
takes the header as the cooldown when no deployment sets its own (router.py,
`deployment_callback_on_failure`, LiteLLM 1.108) and retries at once on a healthy deployment.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edgellm.common.errors import InvalidArgument

DEVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
ROUTING = ("least-busy", "simple-shuffle", "latency-based-routing", "usage-based-routing-v2")
DEFAULT_MODEL = "smollm2-135m-instruct"  # the bundled default artifact's name
DEFAULT_KEY_ENV = "EDGELLM_GATEWAY_API_KEY"  # what `edgellm gateway` itself reads
# The proxy's own key (clients send it); LiteLLM refuses to start without one (1.108).
DEFAULT_MASTER_KEY_ENV = "LITELLM_MASTER_KEY"


@dataclass(frozen=True)
class Target:
    """One gateway: its device label and where it listens."""

    device: str
    host: str
    port: int

    @property
    def address(self) -> str:
        """host:port ([v6]:port)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class FleetOptions:
    """What the router is told (defaults suit phones that serve one request at a time)."""

    model: str = DEFAULT_MODEL
    key_env: str = DEFAULT_KEY_ENV
    master_key_env: str = DEFAULT_MASTER_KEY_ENV
    https: bool = False
    routing: str = "least-busy"  # phones run one request at a time: fewest in flight wins
    num_retries: int = 3
    cooldown_s: int = 30  # when a failure carries no Retry-After
    timeout_s: float = 300.0  # a whole answer on a throttled phone can take minutes
    key_file: str = "gateway-key"  # Prometheus reads the key from a file (relative: beside its config)


def parse_target(text: str) -> Target:
    """`[DEVICE=]HOST:PORT` (IPv6 as [::1]:PORT); the device label defaults to HOST-PORT."""
    device, sep, address = text.rpartition("=")
    if not sep:
        device, address = "", text
    m = re.fullmatch(r"\[(?P<v6>[0-9A-Fa-f:.]+)\]:(?P<port>\S+)|(?P<host>[^\s:\[\]/]+):(?P<p>\S+)", address)
    if m is None:
        raise InvalidArgument(f"--target {text!r}: expected HOST:PORT or DEVICE=HOST:PORT (IPv6: [::1]:8080)")
    host = m.group("v6") or m.group("host")
    port_text = m.group("port") or m.group("p")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise InvalidArgument(
            f"--target {text!r}: the port must be a number within 1..65535, not {port_text!r}"
        )
    name = device or re.sub(r"[^A-Za-z0-9._-]+", "-", f"{host}-{port_text}").strip("-._")
    if not DEVICE_NAME.fullmatch(name):
        raise InvalidArgument(
            f"--target {text!r}: the device label {name!r} must be letters, digits, '.', '_' or '-'"
        )
    return Target(name, host, int(port_text))


def check(targets: Sequence[Target], options: FleetOptions) -> None:
    """Refuse an empty fleet, a label or address given twice, or an unknown routing strategy."""
    if not targets:
        raise InvalidArgument("give at least one --target HOST:PORT (one per gateway)")
    for what, values in (
        ("device label", [t.device for t in targets]),
        ("address", [t.address for t in targets]),
    ):
        dupes = sorted({v for v in values if values.count(v) > 1})
        if dupes:
            raise InvalidArgument(f"--target: the {what} {', '.join(dupes)} is given twice")
    if options.routing not in ROUTING:
        raise InvalidArgument(f"--routing must be one of {', '.join(ROUTING)}, not {options.routing!r}")
    for flag, env in (("--key-env", options.key_env), ("--master-key-env", options.master_key_env)):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env):
            raise InvalidArgument(f"{flag} must be an environment variable name, not {env!r}")


def _deployment(group: str, t: Target, options: FleetOptions, pinned: bool) -> dict[str, Any]:
    scheme = "https" if options.https else "http"
    return {
        "model_name": group,
        "litellm_params": {
            "model": f"openai/{options.model}",  # LiteLLM's OpenAI-compatible provider; sends `model`
            "api_base": f"{scheme}://{t.address}/v1",
            "api_key": f"os.environ/{options.key_env}",
            # Why no SDK retries: the OpenAI SDK would wait out a hot phone's Retry-After on that
            # same phone; the router retries at once on another one instead.
            "max_retries": 0,
            "timeout": options.timeout_s,
        },
        "model_info": {"id": f"{t.device}@pinned" if pinned else t.device, "device": t.device},
    }


def litellm_config(targets: Sequence[Target], options: FleetOptions) -> dict[str, Any]:
    """LiteLLM proxy config: the pool, one group per phone falling back to the pool, the router."""
    check(targets, options)
    pool = [_deployment(options.model, t, options, pinned=False) for t in targets]
    pinned = [_deployment(f"{options.model}@{t.device}", t, options, pinned=True) for t in targets]
    return {
        "model_list": pool + pinned,
        "router_settings": {
            "routing_strategy": options.routing,
            "num_retries": options.num_retries,
            # Cool a deployment down on its first 503/429 (the count must exceed allowed_fails),
            # for its Retry-After, else cooldown_time.
            "allowed_fails": 0,
            "cooldown_time": options.cooldown_s,
            "retry_after": 0,  # retry at once on a healthy deployment
            "timeout": options.timeout_s,
            "fallbacks": [{f"{options.model}@{t.device}": [options.model]} for t in targets],
        },
        "general_settings": {"master_key": f"os.environ/{options.master_key_env}"},
        "litellm_settings": {
            "request_timeout": options.timeout_s,
            "drop_params": False,  # the gateway refuses what it does not implement; say so, never drop
        },
    }


def prometheus_config(targets: Sequence[Target], options: FleetOptions) -> dict[str, Any]:
    """One scrape job over every gateway, each target labelled with its device."""
    check(targets, options)
    return {
        "global": {"scrape_interval": "5s", "evaluation_interval": "15s"},
        "scrape_configs": [
            {
                "job_name": "edgellm",
                "metrics_path": "/metrics",
                # A gateway started with --device NAME labels its metrics itself: keep its label.
                "honor_labels": True,
                "scheme": "https" if options.https else "http",
                "authorization": {"type": "Bearer", "credentials_file": options.key_file},
                "static_configs": [{"targets": [t.address], "labels": {"device": t.device}} for t in targets],
            }
        ],
    }
