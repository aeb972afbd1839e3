"""`edgellm host [--port P]`: run the host service (quantize, evaluate, scan jobs over gRPC)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `host` subcommand."""
    p = sub.add_parser("host", help="run the host service (gRPC, default 127.0.0.1:50052)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=50052)
    p.add_argument(
        "--auth-token", default=None, help="shared secret (required off loopback; or $EDGELLM_TOKEN)"
    )
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Serve until interrupted."""
    import asyncio

    from edgellm.common.auth import token_from_env
    from edgellm.host.server import HostConfig, serve

    asyncio.run(serve(HostConfig(host=ns.host, port=ns.port, auth_token=ns.auth_token or token_from_env())))
    return 0
