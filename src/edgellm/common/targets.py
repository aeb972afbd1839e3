"""Resolve a daemon address from --target, $EDGELLM_TARGET, or the default."""

from __future__ import annotations

import os

DEFAULT_DAEMON_PORT = 50051
DEFAULT_HOST_PORT = 50052
DEFAULT_TARGET = f"127.0.0.1:{DEFAULT_DAEMON_PORT}"


def resolve_target(explicit: str | None) -> str:
    """Return explicit, else $EDGELLM_TARGET, else 127.0.0.1:50051."""
    if explicit:
        return explicit
    return os.environ.get("EDGELLM_TARGET") or DEFAULT_TARGET
