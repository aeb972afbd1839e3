"""`edgellm host [--port P]`: run the host service (quantize, evaluate, scan, deploy jobs over gRPC).

Its client is `edgellm jobs ...` (edgellm.client.commands.jobs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from edgellm.common.argtypes import port_number
from edgellm.common.security_args import add_server_security
from edgellm.common.targets import DEFAULT_HOST_PORT


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `host` subcommand."""
    p = sub.add_parser(
        "host", help="run the host service (gRPC jobs; submit and follow them with `edgellm jobs`)"
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (off loopback: token and TLS)")
    p.add_argument("--port", type=port_number, default=DEFAULT_HOST_PORT, help="port; 0 = any free port")
    add_server_security(p, "~/.config/edgellm/token")
    p.add_argument(
        "--deploy-target",
        action="append",
        default=[],
        help="a daemon address Deploy may push to (repeatable; default $EDGELLM_TARGET, then "
        "127.0.0.1:50051); callers can only pick among these",
    )
    p.add_argument(
        "--artifacts-dir",
        type=Path,
        default=None,
        help="where Quantize may write artifacts (default <cache>/artifacts)",
    )
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Serve until interrupted."""
    import asyncio

    from edgellm.common.tls import ServerTls
    from edgellm.host.server import HostConfig, serve

    tls = None
    if ns.tls_cert or ns.tls_key:
        if not (ns.tls_cert and ns.tls_key):
            raise SystemExit("--tls-cert and --tls-key go together")
        tls = ServerTls(ns.tls_cert, ns.tls_key)
    config = HostConfig(
        host=ns.host,
        port=ns.port,
        auth_token=ns.auth_token,
        auth_token_file=ns.auth_token_file,
        insecure_loopback=ns.insecure_loopback,
        tls=tls,
        deploy_targets=tuple(ns.deploy_target),
        artifacts_root=ns.artifacts_dir,
    )
    asyncio.run(serve(config))
    return 0
