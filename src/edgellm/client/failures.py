"""What a failed command tells the user, and its exit status: one mapping for every subcommand.

Exit statuses: 0 done; 1 failed (the service refused or the work failed); 2 bad input (arguments,
missing files, a request the service calls invalid); 3 the service cannot be reached; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import errno
from dataclasses import dataclass
from pathlib import Path

import grpc

from edgellm.client.whois import HOST_SERVICE as HOST_SERVICE
from edgellm.client.whois import service_at
from edgellm.common.auth import client_token
from edgellm.common.channel import ChannelSecurity, handshake_failed, trusted_tls
from edgellm.common.errors import EdgeError, InvalidArgument
from edgellm.common.targets import DEFAULT_DAEMON_PORT, resolve_host_target, resolve_target
from edgellm.common.tokens import TOKEN_ENV

OK, FAILED, BAD_INPUT, UNREACHABLE, INTERRUPTED = 0, 1, 2, 3, 130
_CLIENT_SEND_RACE = "Internal error from Core"

_BAD_INPUT_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.OUT_OF_RANGE,
    }
)


@dataclass(frozen=True)
class Failure:
    """A message for stderr (may span lines) and the exit status."""

    message: str
    exit_code: int


@dataclass(frozen=True)
class Peer:
    """The service a command talks to, for hints: 'daemon' or 'host service', and its address."""

    kind: str = "daemon"
    target: str = f"127.0.0.1:{DEFAULT_DAEMON_PORT}"
    tls_ca: Path | None = None  # the trust the command was given, for "which server was expected"
    tls_pin: str | None = None


def peer_of(ns: argparse.Namespace) -> Peer:
    """The service a parsed command talks to (commands for the host service set peer_kind)."""
    kind = getattr(ns, "peer_kind", "daemon")
    raw = getattr(ns, "target", None)
    try:
        target = resolve_host_target(raw) if kind == HOST_SERVICE else resolve_target(raw)
    except InvalidArgument:  # a URL or a bad port: the command itself reports it, naming the fix
        target = str(raw)
    return Peer(kind, target, getattr(ns, "tls_ca", None), getattr(ns, "tls_pin", None))


def rpc_failure(err: grpc.RpcError, peer: Peer) -> Failure:
    """A gRPC error as the user should read it, with what to do next."""
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else None) or str(err)
    special = _special_failure(code, details, peer)
    if special is not None:
        return special
    # The message is the service's own words; the gRPC code name (INVALID_ARGUMENT, …) means
    # nothing to a user, so it is shown only with --log-level DEBUG (and the exit status says it).
    name = code.name if code is not None else "ERROR"
    shown = f"{details} [{name}]" if _debugging() else details
    return Failure(shown, BAD_INPUT if code in _BAD_INPUT_CODES else FAILED)


def _special_failure(code: grpc.StatusCode | None, details: str, peer: Peer) -> Failure | None:
    """The codes whose details alone do not tell the user what happened or what to do."""
    if code == grpc.StatusCode.UNAVAILABLE:
        # A TLS server this client cannot talk to is reachable: it refused us, like a wrong token.
        reached = handshake_failed(details)
        return Failure(_unreachable(peer, details), FAILED if reached else UNREACHABLE)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Failure(f"the {peer.kind} at {peer.target} did not answer in time ({details})", UNREACHABLE)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Failure(_unauthenticated(peer, details), FAILED)
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return Failure(_unimplemented(peer, details), BAD_INPUT)
    if code == grpc.StatusCode.INTERNAL and _CLIENT_SEND_RACE in details:
        # Why: grpc-aio's client reports a message it was still sending when the server ended
        # the call as INTERNAL "Internal error from Core", hiding the server's own status.
        return Failure(
            f"the {peer.kind} at {peer.target} ended the stream while this client was still sending "
            "(most often it stopped a stream that was too slow or idle); run the command again: "
            "a push resumes where it stopped",
            FAILED,
        )
    return None


def _debugging() -> bool:
    import logging

    return logging.getLogger().isEnabledFor(logging.DEBUG)


def _unreachable(peer: Peer, details: str) -> str:
    if handshake_failed(details) and client_token() is None:
        return _no_token(peer) + " (it serves TLS: this client also trusts no certificate of it)"
    if handshake_failed(details):
        from edgellm.common.pins import diagnose

        try:
            trust = trusted_tls(ChannelSecurity.find(tls_ca=peer.tls_ca, tls_pin=peer.tls_pin))
        except EdgeError:
            trust = None
        return diagnose(peer.target, trust)
    reason = "connection refused" if "refused" in details.lower() else details
    lines = [f"cannot reach the {peer.kind} at {peer.target} ({reason})"]
    port = peer.target.rsplit(":", 1)[-1]
    if peer.kind == "daemon":
        lines += [
            "  here: start one with `edgellm daemon --model default` (another terminal) or pass --target H:P",
            f"  a phone: check `adb forward --list` shows tcp:{port}, or run `edgellm deploy device`",
        ]
    else:
        lines.append("  start it with `edgellm host` on that machine, or pass --target H:P")
    return "\n".join(lines)


def _unimplemented(peer: Peer, details: str) -> str:
    """The server does not have the method: most often the other edgellm service's port."""
    security = ChannelSecurity.find(tls_ca=peer.tls_ca, tls_pin=peer.tls_pin, target=peer.target)
    found = service_at(peer.target, security)
    if found == HOST_SERVICE and peer.kind != HOST_SERVICE:
        return (
            f"{peer.target} is edgellm's host service, not a daemon: use `edgellm jobs ...` with it, "
            "or give --target the daemon's address (`edgellm daemon` listens on 127.0.0.1:50051)"
        )
    if found is not None and found != peer.kind:
        return (
            f"{peer.target} is an edgellm daemon, not the host service: use `edgellm status`, "
            "`generate` and the other daemon commands with it, or give `edgellm jobs --target` the "
            "host service's address (`edgellm host` listens on 127.0.0.1:50052)"
        )
    if found is not None:
        return (
            f"the {peer.kind} at {peer.target} is older than this client and lacks this call "
            f"({details}): update it"
        )
    return f"the server at {peer.target} does not know this call ({details}): is it an edgellm {peer.kind}?"


def _no_token(peer: Peer) -> str:
    return (
        f"the {peer.kind} at {peer.target} requires a token and none was found: set ${TOKEN_ENV}, "
        "or put it in ~/.config/edgellm/token (0600); `edgellm deploy device` fetches a phone's"
    )


def _unauthenticated(peer: Peer, details: str) -> str:
    from edgellm.common.tokens import find_client_token

    found = find_client_token(target=peer.target)
    if found is None:
        return _no_token(peer)
    refused = f"the {peer.kind} at {peer.target} refused the token from {found.source} ({details})"
    if found.source == f"${TOKEN_ENV}":
        # The variable wins over every token file, so repeating the lookup order would not say
        # why a correct ~/.edgellm/token is not used.
        return (
            f"{refused}: ${TOKEN_ENV} overrides the token files, so set it to this {peer.kind}'s "
            f"token, or `unset {TOKEN_ENV}` to use the file the {peer.kind} wrote (docs/security.md)"
        )
    return (
        f"{refused}: put this {peer.kind}'s token there, set ${TOKEN_ENV} (it overrides the files), "
        "or pass --token-file (docs/security.md)"
    )


def failure_for(exc: BaseException, peer: Peer | None = None) -> Failure | None:
    """The user-facing failure for an exception a command let through, or None for a bug."""
    if isinstance(exc, grpc.RpcError):
        return rpc_failure(exc, peer or Peer())
    if isinstance(exc, EdgeError):
        return Failure(str(exc), BAD_INPUT if exc.code.name in _BAD_INPUT_NAMES else FAILED)
    if isinstance(exc, FileExistsError | FileNotFoundError | NotADirectoryError | IsADirectoryError):
        return Failure(_os_message(exc), BAD_INPUT)
    if isinstance(exc, PermissionError):
        return Failure(_os_message(exc), FAILED)
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return Failure(str(exc), FAILED)
    return None


_BAD_INPUT_NAMES = frozenset(code.name for code in _BAD_INPUT_CODES)


def _os_message(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror.lower()}"
    return str(exc)
