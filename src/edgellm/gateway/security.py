"""Who may call the gateway: an API key (bearer), and Host/Origin checks against DNS rebinding.

A web page the user visits can make the browser send requests to 127.0.0.1:8080, and by DNS
rebinding even read the answers (its own domain, re-pointed at 127.0.0.1). Two checks stop it:
the Host header must be an IP literal, `localhost`, or a name the operator allowed (a rebinding
page's requests carry the attacker's domain), and a request carrying an Origin header (only
browsers send one) must come from an origin the operator allowed — none by default.
"""

from __future__ import annotations

import hmac
import ipaddress

from starlette.types import ASGIApp, Receive, Scope, Send

from edgellm.gateway.config import GatewayConfig
from edgellm.gateway.errors import ApiError, send_error
from edgellm.gateway.keys import KeyFile

OPEN_PATHS = frozenset({"/health"})  # supervisors and load balancers probe without the key


def _host_name(host_header: str) -> str:
    """The Host header without its port ('[::1]:8080' → '::1', 'a.b:80' → 'a.b')."""
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def host_allowed(host_header: str, allowed: tuple[str, ...]) -> bool:
    """True for IP literals, localhost, and the configured names (case-insensitive)."""
    name = _host_name(host_header).lower().rstrip(".")
    if not name:
        return False
    if name == "localhost" or name in {a.lower() for a in allowed}:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def bearer_ok(header: str, key: str) -> bool:
    """`Authorization: Bearer <key>` (scheme case-insensitive, key compared in constant time)."""
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), key.encode())


class Guard:
    """ASGI middleware: Host, Origin and API key checks before anything else runs."""

    def __init__(self, app: ASGIApp, config: GatewayConfig) -> None:
        self.app = app
        self.config = config
        self.key_file = KeyFile(config.api_key_file) if config.api_key_file is not None else None

    def key(self) -> str:
        """The key clients must send now ('' = none: --no-api-key on loopback)."""
        return self.key_file.current() if self.key_file is not None else self.config.api_key or ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse in OpenAI's error shape, or pass on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._check(scope, headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        extra = [(b"www-authenticate", b"Bearer")] if refusal.status == 401 else []
        await send_error(send, refusal, extra)

    def _check(self, scope: Scope, headers: dict[str, str]) -> ApiError | None:
        c = self.config
        host = headers.get("host", "")
        if not host_allowed(host, c.allowed_hosts):
            return ApiError(
                403, f"Host {host!r} is not allowed (DNS rebinding guard): add it with --allowed-host",
                code="host_not_allowed", kind="permission_error",
            )  # fmt: skip
        origin = headers.get("origin")
        if origin is not None and origin not in c.cors_origins:
            return ApiError(
                403, f"Origin {origin!r} is not allowed: browsers are refused unless --cors-origin names it",
                code="origin_not_allowed", kind="permission_error",
            )  # fmt: skip
        if scope["path"] in OPEN_PATHS or scope["method"] == "OPTIONS":
            return None
        key = self.key()
        if key and not bearer_ok(headers.get("authorization", ""), key):
            return ApiError(
                401, "Incorrect or missing API key: send 'Authorization: Bearer <key>' (the OpenAI SDK's "
                "api_key=); the key is in the file the gateway printed at start (default "
                "~/.config/edgellm/gateway-key)",
                code="invalid_api_key", kind="authentication_error",
            )  # fmt: skip
        return None
