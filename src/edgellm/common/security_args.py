"""Command-line options for authentication and TLS, shared by `edgellm daemon`, `host` and the clients."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from edgellm.common.cli_options import add_option, option
from edgellm.common.tokens import TOKEN_ENV


def server_security_options(default_file: str) -> dict[str, dict[str, Any]]:
    """Flag metadata of the server's auth and TLS settings, keyed by DaemonConfig field name.

    default_file: where the token file is when --auth-token-file is not given (shown in the help).
    """
    return {
        "auth_token_file": option(
            "--auth-token-file",
            f"file holding the bearer token clients must send (default {default_file}, made 0600 "
            "with a random token on first start)",
            type=Path,
        ),
        "auth_token": option(
            "--auth-token",
            f"the token itself (default ${TOKEN_ENV}); NOTE: a value given here shows in `ps` to "
            "every user of this machine, prefer --auth-token-file",
            env=TOKEN_ENV,
        ),
        "insecure_loopback": option(
            "--insecure-loopback",
            "no token at all, for tests and benchmarks: any local process (any app on a phone) "
            "gets full control; refused off loopback",
            store_true=True,
        ),
        "tls_cert": option("--tls-cert", "PEM certificate chain: serve TLS", type=Path),
        "tls_key": option("--tls-key", "PEM private key of --tls-cert", type=Path),
        "tls_self_signed": option(
            "--tls-self-signed",
            "serve TLS with a self-signed certificate made on first start (<data dir>/tls): the "
            "default whenever a token is required, kept for old scripts; clients on this machine "
            "trust it without flags, others pin its fingerprint (logged at start as tls=sha256:…)",
            store_true=True,
        ),
    }


def add_server_security(p: argparse.ArgumentParser, default_file: str) -> None:
    """--auth-token-file, --auth-token, --insecure-loopback, --tls-cert/--tls-key/--tls-self-signed."""
    for meta in server_security_options(default_file).values():
        # Unset: no token, no TLS files (argparse's None), switches off.
        add_option(p, meta, False if meta.get("action") == "store_true" else None)


def add_client_security(p: argparse.ArgumentParser, nested: bool = False) -> None:
    """--token-file, --tls-ca, --tls-pin (the token is otherwise found without flags).

    nested: on a sub-subcommand whose parent takes them too (SUPPRESS keeps the parent's value).
    """
    unset = argparse.SUPPRESS if nested else None
    p.add_argument(
        "--token-file",
        type=Path,
        default=unset,
        help=f"bearer token file (default: ${TOKEN_ENV}, then ~/.config/edgellm/token, "
        "then ~/.edgellm/token)",
    )
    p.add_argument(
        "--insecure-loopback",
        action="store_true",
        default=unset if nested else False,
        help="talk to a daemon started with --insecure-loopback: plaintext, no token, 127.0.0.1 / ::1 "
        "only (default $EDGELLM_INSECURE_LOOPBACK=1); without it a client sends its token only "
        "over TLS to a certificate it trusts",
    )
    p.add_argument(
        "--tls-ca",
        type=Path,
        default=unset,
        help="connect with TLS, trusting this CA bundle (default $EDGELLM_TLS_CA)",
    )
    p.add_argument(
        "--tls-pin",
        default=unset,
        help="trust only a server whose certificate has this sha256 fingerprint (default "
        "$EDGELLM_TLS_PIN, else every certificate in ~/.config/edgellm/pins and of this user's "
        "own daemon and host service)",
    )
