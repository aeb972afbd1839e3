"""`edgellm gateway`: the OpenAI-compatible HTTP API and Prometheus metrics in front of a daemon."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgellm.client.commands.common_args import add_target, security_from
from edgellm.common.errors import InvalidArgument
from edgellm.gateway.config import API_KEY_ENV, DEFAULT_PORT, GatewayConfig, api_key_from_env


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `gateway` subcommand."""
    p = sub.add_parser(
        "gateway", help="OpenAI-compatible HTTP API, /health and /metrics in front of a daemon"
    )
    add_target(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument(
        "--api-key-file", type=Path, default=None,
        help=f"file holding the key clients must send as a bearer token (default ${API_KEY_ENV}); "
        "required off loopback",
    )  # fmt: skip
    p.add_argument(
        "--allowed-host", action="append", default=[],
        help="a host name clients may use in the Host header besides IPs and localhost (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--cors-origin", action="append", default=[],
        help="a browser origin allowed to call the API, e.g. http://localhost:3000 (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--telemetry-period", type=float, default=2.0,
        help="seconds between device telemetry reads for /metrics (default 2)",
    )  # fmt: skip
    p.set_defaults(handler=run)


def config_from(ns: argparse.Namespace) -> GatewayConfig:
    """GatewayConfig from parsed arguments."""
    key = ns.api_key_file.read_text().strip() if ns.api_key_file else api_key_from_env()
    return GatewayConfig(
        target=ns.target,
        daemon_security=security_from(ns),
        host=ns.host,
        port=ns.port,
        api_key=key,
        allowed_hosts=tuple(ns.allowed_host),
        cors_origins=tuple(ns.cors_origin),
        telemetry_period_s=ns.telemetry_period,
    )


def run(ns: argparse.Namespace) -> int:
    """Serve until interrupted (exit 2 on a configuration it refuses)."""
    try:
        config = config_from(ns)
        config.validate()
    except (InvalidArgument, OSError) as err:
        sys.stderr.write(f"edgellm: gateway: {err}\n")
        return 2
    try:
        from edgellm.gateway.server import serve  # uvicorn and starlette: the gateway extra only
    except ImportError as err:
        sys.stderr.write(f"edgellm: gateway: {err.name} is missing: pip install 'edgellm[gateway]'\n")
        return 2
    serve(config)
    return 0
