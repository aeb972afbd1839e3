"""The gateway's settings: one frozen dataclass, built by the CLI or a test."""

from __future__ import annotations

import os
from dataclasses import dataclass

from edgellm.client.channel import ChannelSecurity
from edgellm.common.auth import is_loopback
from edgellm.common.errors import InvalidArgument

API_KEY_ENV = "EDGELLM_GATEWAY_API_KEY"
DEFAULT_PORT = 8080


@dataclass(frozen=True)
class GatewayConfig:
    """Where to listen, which daemon to talk to, and who may call."""

    target: str | None = None  # daemon H:P (None: $EDGELLM_TARGET, then 127.0.0.1:50051)
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None  # bearer key clients must send; required off loopback
    # toward the daemon: token and TLS trust (None: found as every client finds them)
    daemon_security: ChannelSecurity | None = None
    allowed_hosts: tuple[str, ...] = ()  # extra Host names (DNS rebinding guard); IPs are always fine
    cors_origins: tuple[str, ...] = ()  # browser origins allowed (CORS); none = CORS off
    telemetry_period_s: float = 2.0  # device gauges are read once per period and cached
    session_capacity: int = 256  # conversations remembered for KV reuse

    def validate(self) -> None:
        """Refuse a configuration that would serve without authentication off loopback."""
        if not is_loopback(self.host) and not self.api_key:
            raise InvalidArgument(
                f"refusing to serve the gateway on {self.host} without an API key: set --api-key-file or "
                f"${API_KEY_ENV} (or bind 127.0.0.1)"
            )
        if not 0.1 <= self.telemetry_period_s <= 3600:
            raise InvalidArgument(
                f"--telemetry-period must be within 0.1..3600 s, not {self.telemetry_period_s}"
            )


def api_key_from_env() -> str | None:
    """The gateway's API key from the environment, if set."""
    return os.environ.get(API_KEY_ENV) or None
