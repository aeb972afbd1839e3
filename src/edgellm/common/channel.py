"""The one place clients open channels: the token and TLS ride on the channel's credentials.

In common because every caller of a daemon or host service opens one here: the client, the host's
deploy job, `edgellm deploy` and the gateway.

Every call on such a channel carries `authorization: Bearer <token>` (gRPC call credentials),
so stubs, the push client's hand-made call and health probes need no per-call metadata.
A token is sent only to a server that proved who it is (H1 of the second security review): by
a TLS handshake against a pinned certificate (`--tls-pin`, else every certificate this user's
own servers use, `edgellm.common.pins`) or a CA bundle (`--tls-ca`). A process squatting on the
daemon's loopback port holds none of those keys and gets an error, never the token. Only a
client without a token, or one told `--insecure-loopback` (for a daemon started that way: tests,
benchmarks), opens a plaintext channel to a loopback address and sends no token.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from edgellm.common.auth import is_loopback, target_host
from edgellm.common.errors import FailedPrecondition
from edgellm.common.pins import known_certs, trust_of
from edgellm.common.tls import ClientTls, normalise_pin
from edgellm.common.tokens import find_client_token

Options = Sequence[tuple[str, str | int]]
INSECURE_ENV = "EDGELLM_INSECURE_LOOPBACK"  # "1": as --insecure-loopback on every client command

# Generous both ways: a 200 KB prompt or a long chat history is far below this; the daemon
# enforces its own receive limit (edgellm.device.rpc.server.MAX_MESSAGE_BYTES).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
DEFAULT_OPTIONS: Options = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)


@dataclass(frozen=True)
class ChannelSecurity:
    """The token a client sends (None: none) and how it trusts a TLS server (None: plaintext)."""

    token: str | None = None
    token_source: str = ""
    tls: ClientTls | None = None
    plaintext: bool = False  # --insecure-loopback: no token, no TLS, loopback only

    @classmethod
    def insecure_loopback(cls) -> ChannelSecurity:
        """For a daemon started with --insecure-loopback: plaintext, no token (loopback only)."""
        return cls(None, "--insecure-loopback", None, plaintext=True)

    @classmethod
    def find(
        cls,
        token: str | None = None,
        token_file: Path | None = None,
        tls_ca: Path | None = None,
        tls_pin: str | None = None,
        target: str | None = None,
        insecure_loopback: bool = False,
    ) -> ChannelSecurity:
        """Explicit values, else $EDGELLM_TOKEN / the config file / the local daemon's token, and TLS env."""
        if insecure_loopback or os.environ.get(INSECURE_ENV) == "1":
            return cls.insecure_loopback()
        found = find_client_token(token, token_file, target)
        tls_ca = tls_ca or _env_path("EDGELLM_TLS_CA")
        explicit_pin = bool(tls_pin)
        tls_pin = tls_pin or os.environ.get("EDGELLM_TLS_PIN") or None
        tls = None
        if tls_pin:
            source = "--tls-pin" if explicit_pin else "$EDGELLM_TLS_PIN"
            tls = ClientTls(pins=(tls_pin,), where=(f"{normalise_pin(tls_pin)} ({source})",))
        elif tls_ca:
            tls = ClientTls(ca=tls_ca)
        return cls(found.token if found else None, found.source if found else "", tls)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def trusted_tls(security: ChannelSecurity) -> ClientTls | None:
    """The TLS trust for SECURITY: as given, else every certificate the user trusts (None: none)."""
    return security.tls if security.tls is not None else trust_of(known_certs())


def _credentials(
    target: str, security: ChannelSecurity
) -> tuple[grpc.ChannelCredentials | None, list[tuple[str, str]]]:
    """(channel credentials or None for a plaintext channel without a token, extra options)."""
    if security.plaintext:
        if not is_loopback(target_host(target)):
            raise FailedPrecondition(f"--insecure-loopback is for 127.0.0.1 / ::1 only, not {target}")
        return None, []
    if security.token is None and security.tls is None:
        return None, []
    tls = trusted_tls(security)
    if tls is None:
        raise FailedPrecondition(
            f"not sending the token to {target}: no certificate is known for it, so a program "
            "squatting on that port could not be told from the daemon. Run `edgellm deploy device` "
            "(it fetches the phone's certificate with its token), start the daemon once on this "
            "machine (it makes <data dir>/tls/cert.pem), or pass --tls-pin sha256:… (the daemon "
            "logs it at start as `tls=`) or `edgellm token trust CERT.pem --label NAME`"
        )
    creds, options = tls.credentials(target)
    if security.token is not None:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(security.token))
    return creds, options


# What grpc says when the TLS handshake failed: a server that is not the one this client trusts
# (a squatter on the port, H1), or one that does not speak TLS at all.
_HANDSHAKE_HINTS = ("handshake", "ssl", "certificate", "socket closed", "tsi_")


def handshake_failed(details: str) -> bool:
    """Whether a gRPC UNAVAILABLE's details say the TLS handshake failed (not "nothing listening")."""
    return any(hint in details.lower() for hint in _HANDSHAKE_HINTS)


def _security(security: ChannelSecurity | str | None, target: str | None = None) -> ChannelSecurity:
    """SECURITY as given; a bare string is a token; None: found without flags for TARGET."""
    if isinstance(security, str):
        return ChannelSecurity(security)
    return security if security is not None else ChannelSecurity.find(target=target)


def open_channel(
    target: str, security: ChannelSecurity | str | None = None, options: Options = DEFAULT_OPTIONS
) -> grpc.Channel:
    """A blocking channel to TARGET with the token and TLS found without flags (or SECURITY / a token)."""
    security = _security(security, target)
    creds, extra = _credentials(target, security)
    opts = [*options, *extra]
    if creds is None:
        return grpc.insecure_channel(target, options=opts)
    return grpc.secure_channel(target, creds, options=opts)


def open_aio_channel(
    target: str, security: ChannelSecurity | str | None = None, options: Options = DEFAULT_OPTIONS
) -> grpc.aio.Channel:
    """The asyncio twin of open_channel."""
    security = _security(security, target)
    creds, extra = _credentials(target, security)
    opts = [*options, *extra]
    if creds is None:
        return grpc.aio.insecure_channel(target, options=opts)
    return grpc.aio.secure_channel(target, creds, options=opts)
