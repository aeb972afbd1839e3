"""Where the daemon is and how to trust it: the --target/--token-file/--tls-* options and their reading.

Outside `client.commands` because two programs take these options: the client's subcommands and
`edgellm gateway`, which sits on the client's connection but not on its CLI.
"""

from __future__ import annotations

import argparse

from edgellm.client.client import DaemonClient
from edgellm.client.failures import peer_of
from edgellm.common.channel import ChannelSecurity
from edgellm.common.security_args import add_client_security
from edgellm.common.targets import DEFAULT_TARGET, TARGET_ENV

__all__ = ["add_target", "client_from", "security_from"]


def add_target(parser: argparse.ArgumentParser, nested: bool = False) -> None:
    """--target H[:P] (default $EDGELLM_TARGET, then 127.0.0.1:50051; a missing port means 50051),
    and --token-file / --tls-ca / --tls-pin.

    nested: on a sub-subcommand whose parent also takes --target (given either before or after
    the verb); SUPPRESS keeps the child's unset default from overwriting the parent's value.
    """
    parser.add_argument(
        "--target",
        default=argparse.SUPPRESS if nested else None,
        metavar="HOST[:PORT]",
        help=f"daemon address (default: ${TARGET_ENV}, then {DEFAULT_TARGET}; port 50051 when omitted)",
    )
    add_client_security(parser, nested)


def security_from(ns: argparse.Namespace) -> ChannelSecurity:
    """The token and TLS trust from --token-file/--tls-ca/--tls-pin, else found without flags."""
    return ChannelSecurity.find(
        token_file=getattr(ns, "token_file", None),
        tls_ca=getattr(ns, "tls_ca", None),
        tls_pin=getattr(ns, "tls_pin", None),
        insecure_loopback=getattr(ns, "insecure_loopback", False),
        target=peer_of(ns).target,  # a deployed phone's own token is kept per address (L14)
    )


def client_from(ns: argparse.Namespace, timeout: float | None = None) -> DaemonClient:
    """A DaemonClient for --target with the token and TLS from the options, environment or config."""
    return DaemonClient(ns.target, timeout=timeout, security=security_from(ns))
