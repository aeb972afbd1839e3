"""`edgellm host [--port P]`: run the host service (quantize, evaluate, scan, deploy jobs over gRPC)."""

from __future__ import annotations

import argparse
from pathlib import Path

from edgellm.common.security_args import add_server_security


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `host` subcommand."""
    p = sub.add_parser("host", help="run the host service (gRPC, default 127.0.0.1:50052)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=50052)
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

    from edgellm.common.tls import ServerTls, ensure_self_signed
    from edgellm.common.tokens import config_dir
    from edgellm.host.server import HostConfig, serve

    tls = None
    if ns.tls_cert or ns.tls_key:
        if not (ns.tls_cert and ns.tls_key):
            raise SystemExit("--tls-cert and --tls-key go together")
        tls = ServerTls(ns.tls_cert, ns.tls_key)
    elif ns.tls_self_signed:
        tls = ensure_self_signed(config_dir() / "host-tls")
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
