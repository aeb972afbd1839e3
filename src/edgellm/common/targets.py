"""Resolve a service address from --target, an environment variable, or the default."""

from __future__ import annotations

import os
import re

from edgellm.common.errors import InvalidArgument

MAX_PORT = 65535
DEFAULT_DAEMON_PORT = 50051
DEFAULT_HOST_PORT = 50052
DEFAULT_TARGET = f"127.0.0.1:{DEFAULT_DAEMON_PORT}"
DEFAULT_HOST_TARGET = f"127.0.0.1:{DEFAULT_HOST_PORT}"
TARGET_ENV = "EDGELLM_TARGET"
HOST_TARGET_ENV = "EDGELLM_HOST_TARGET"


# URL schemes people paste from a browser or the gateway's address; gRPC would read them as DNS names.
_URL = re.compile(r"(?i)^(https?|grpcs?)://([^/]*)/?$")


def with_port(target: str, default_port: int = DEFAULT_DAEMON_PORT) -> str:
    """`host` → `host:PORT`; `host:p`, `[v6]:p` and scheme targets (`unix:`, `dns:///`) stay as they are.

    Why: gRPC reads a bare `localhost` as a DNS name with the default port 443. A URL
    (`http://h:p`) or a port outside 1-65535 is InvalidArgument naming the HOST:PORT to give.
    """
    target = target.strip()
    url = _URL.match(target)
    if url is not None:
        fixed = with_port(url.group(2), default_port) if url.group(2) else f"127.0.0.1:{default_port}"
        raise InvalidArgument(
            f"{target} is a URL, but a target is HOST:PORT: give {fixed} (the client chooses TLS "
            "itself, docs/security.md)"
        )
    if "://" in target or target.startswith(("unix:", "unix-abstract:", "vsock:")):
        return target
    if target.startswith("["):  # [v6] or [v6]:port
        return _checked(target, target.rpartition("]:")[2]) if "]:" in target else f"{target}:{default_port}"
    if target.count(":") > 1:  # a bare IPv6 address
        return f"[{target}]:{default_port}"
    host, sep, port = target.partition(":")
    return _checked(target, port) if sep and port else f"{host}:{default_port}"


def _checked(target: str, port: str) -> str:
    """TARGET when PORT is a TCP port (1-65535); InvalidArgument ("bad port") otherwise."""
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= MAX_PORT):
        raise InvalidArgument(f"bad port {port!r} in {target}: a port is a number from 1 to {MAX_PORT}")
    return target


def resolve_target(explicit: str | None, default_port: int = DEFAULT_DAEMON_PORT) -> str:
    """The daemon: explicit, else $EDGELLM_TARGET, else 127.0.0.1:50051 (a missing port means 50051)."""
    chosen = explicit or os.environ.get(TARGET_ENV) or f"127.0.0.1:{default_port}"
    return with_port(chosen, default_port)


def resolve_host_target(explicit: str | None) -> str:
    """The host service: explicit, else $EDGELLM_HOST_TARGET, else 127.0.0.1:50052."""
    chosen = explicit or os.environ.get(HOST_TARGET_ENV) or DEFAULT_HOST_TARGET
    return with_port(chosen, DEFAULT_HOST_PORT)
