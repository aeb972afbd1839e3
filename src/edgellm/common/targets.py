"""Resolve a service address from --target, an environment variable, or the default."""

from __future__ import annotations

import os

DEFAULT_DAEMON_PORT = 50051
DEFAULT_HOST_PORT = 50052
DEFAULT_TARGET = f"127.0.0.1:{DEFAULT_DAEMON_PORT}"
DEFAULT_HOST_TARGET = f"127.0.0.1:{DEFAULT_HOST_PORT}"
TARGET_ENV = "EDGELLM_TARGET"
HOST_TARGET_ENV = "EDGELLM_HOST_TARGET"


def with_port(target: str, default_port: int = DEFAULT_DAEMON_PORT) -> str:
    """`host` → `host:PORT`; `host:p`, `[v6]:p` and scheme targets (`unix:`, `dns:///`) stay as they are.

    Why: gRPC reads a bare `localhost` as a DNS name with the default port 443.
    """
    target = target.strip()
    if "://" in target or target.startswith(("unix:", "unix-abstract:", "vsock:")):
        return target
    if target.startswith("["):  # [v6] or [v6]:port
        return target if "]:" in target else f"{target}:{default_port}"
    if target.count(":") > 1:  # a bare IPv6 address
        return f"[{target}]:{default_port}"
    host, sep, port = target.partition(":")
    return target if sep and port else f"{host}:{default_port}"


def resolve_target(explicit: str | None, default_port: int = DEFAULT_DAEMON_PORT) -> str:
    """The daemon: explicit, else $EDGELLM_TARGET, else 127.0.0.1:50051 (a missing port means 50051)."""
    chosen = explicit or os.environ.get(TARGET_ENV) or f"127.0.0.1:{default_port}"
    return with_port(chosen, default_port)


def resolve_host_target(explicit: str | None) -> str:
    """The host service: explicit, else $EDGELLM_HOST_TARGET, else 127.0.0.1:50052."""
    chosen = explicit or os.environ.get(HOST_TARGET_ENV) or DEFAULT_HOST_TARGET
    return with_port(chosen, DEFAULT_HOST_PORT)
