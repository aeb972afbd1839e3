"""The gateway's settings: one frozen dataclass, built by the CLI or a test."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from edgellm.client.fleet import DEVICE_NAME
from edgellm.common.auth import is_loopback
from edgellm.common.channel import ChannelSecurity
from edgellm.common.errors import InvalidArgument
from edgellm.common.tls import ServerTls

API_KEY_ENV = "EDGELLM_GATEWAY_API_KEY"
DEFAULT_PORT = 8080
MIB = 1024 * 1024


def check_device(name: str) -> str:
    """NAME when it is a usable label value, else InvalidArgument saying what is allowed."""
    if not DEVICE_NAME.fullmatch(name):
        raise InvalidArgument(
            f"--device {name!r}: use 1-63 letters, digits, '.', '_' or '-' (starting with a letter or digit)"
        )
    return name


@dataclass(frozen=True)
class Limits:
    """What one request, and all of them together, may ask of the gateway (M4)."""

    max_body_bytes: int = MIB  # a request body past this is a 413 (read in chunks, never buffered whole)
    max_concurrent: int = 16  # completion requests at once; more is a 429 with Retry-After
    max_tokens: int = 4096  # max_tokens / max_completion_tokens above this is a 400 naming the field
    # Why a character cap before the device: the daemon tokenizes a prompt on its single engine
    # worker before it checks the context (~0.2 s per 512 KiB on the host, more on a phone).
    max_message_chars: int = 256 * 1024  # per message, and for a completion's prompt
    max_logit_bias: int = 300  # logit_bias entries (OpenAI's own limit)

    def validate(self) -> None:
        """Refuse limits that are zero, negative or absurd."""
        for name, value, hi in (
            ("--max-body-bytes", self.max_body_bytes, 1024 * MIB),
            ("--max-concurrent", self.max_concurrent, 4096),
            ("--max-tokens-cap", self.max_tokens, 2**31 - 1),
            ("max_message_chars", self.max_message_chars, 1024 * MIB),
            ("max_logit_bias", self.max_logit_bias, 100_000),
        ):
            if not 1 <= value <= hi:
                raise InvalidArgument(f"{name} must be within 1..{hi}, not {value}")


@dataclass(frozen=True)
class Shedding:
    """Whether a hot device sheds completion requests, and how long the router should stay away."""

    when_hot: bool = True
    # Why 30 s: an idle phone cools over tens of seconds to minutes, so a router back much sooner
    # mostly finds it still hot; LiteLLM takes Retry-After as the deployment's cooldown.
    hot_retry_after_s: int = 30


@dataclass(frozen=True)
class GatewayConfig:
    """Where to listen, which daemon to talk to, and who may call."""

    target: str | None = None  # daemon H:P (None: $EDGELLM_TARGET, then 127.0.0.1:50051)
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None  # bearer key clients must send
    api_key_file: Path | None = None  # or a file holding it, re-read when it changes (rotation)
    no_api_key: bool = False  # serve without a key: loopback only, and only when asked for
    tls: ServerTls | None = None  # HTTPS certificate and key; required off loopback
    # toward the daemon: token and TLS trust (None: found as every client finds them)
    daemon_security: ChannelSecurity | None = None
    allowed_hosts: tuple[str, ...] = ()  # extra Host names (DNS rebinding guard); IPs are always fine
    cors_origins: tuple[str, ...] = ()  # browser origins allowed (CORS); none = CORS off
    telemetry_period_s: float = 2.0  # device gauges are read once per period and cached
    session_capacity: int = 256  # conversations remembered for KV reuse
    limits: Limits = field(default_factory=Limits)
    device: str | None = None  # a `device` label on every exported metric (a fleet's phones)
    shedding: Shedding = field(default_factory=Shedding)  # a hot device answers 503 (docs/fleet.md)

    @property
    def keyed(self) -> bool:
        """Whether clients must send a key."""
        return bool(self.api_key) or self.api_key_file is not None

    def validate(self) -> None:
        """Refuse a configuration that would serve without a key, or in cleartext off loopback."""
        loopback = is_loopback(self.host)
        if self.no_api_key and self.keyed:
            raise InvalidArgument("--no-api-key contradicts the API key given (--api-key-file or the key)")
        if not self.keyed and not self.no_api_key:
            raise InvalidArgument(
                "refusing to serve the gateway without an API key: give --api-key-file or "
                f"${API_KEY_ENV} (the `edgellm gateway` command makes one by default), "
                "or --no-api-key on loopback"
            )
        if self.no_api_key and not loopback:
            raise InvalidArgument(
                f"refusing to serve the gateway on {self.host} without an API key: --no-api-key is for "
                "127.0.0.1 only; drop it (a key is made in the config dir) or give --api-key-file"
            )
        if not loopback and self.tls is None:
            raise InvalidArgument(
                f"refusing to serve the gateway on {self.host} over plain HTTP (the key and every prompt "
                "would cross the network in cleartext): give --tls-cert and --tls-key, or --tls-self-signed"
            )
        if not 0.1 <= self.telemetry_period_s <= 3600:
            raise InvalidArgument(
                f"--telemetry-period must be within 0.1..3600 s, not {self.telemetry_period_s}"
            )
        if not 1 <= self.shedding.hot_retry_after_s <= 3600:
            raise InvalidArgument(
                f"--hot-retry-after must be within 1..3600 s, not {self.shedding.hot_retry_after_s}"
            )
        if self.device is not None:
            check_device(self.device)
        self.limits.validate()


def api_key_from_env() -> str | None:
    """The gateway's API key from the environment, if set."""
    return os.environ.get(API_KEY_ENV) or None
