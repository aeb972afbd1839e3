"""`edgellm host [--port P]`: run the host service (quantize, evaluate, scan, deploy jobs over gRPC).

Its client is `edgellm jobs ...` (edgellm.client.commands.jobs).
"""

from __future__ import annotations

import argparse

from edgellm.common.argtypes import port_number
from edgellm.common.targets import DEFAULT_HOST_PORT


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `host` subcommand."""
    p = sub.add_parser(
        "host", help="run the host service (gRPC jobs; submit and follow them with `edgellm jobs`)"
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (off loopback a token is required)")
    p.add_argument("--port", type=port_number, default=DEFAULT_HOST_PORT, help="port; 0 = any free port")
    p.add_argument(
        "--auth-token",
        default=None,
        help="bearer token clients must send (default: $EDGELLM_TOKEN); required off loopback; "
        "visible in `ps`, prefer the variable",
    )
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Serve until interrupted."""
    import asyncio

    from edgellm.common.auth import require_token_off_loopback, token_from_env
    from edgellm.host.server import HostConfig, serve

    token = ns.auth_token or token_from_env()
    require_token_off_loopback(ns.host, token)
    asyncio.run(serve(HostConfig(host=ns.host, port=ns.port, auth_token=token)))
    return 0
