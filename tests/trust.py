"""Make a test's daemon known to clients the way `edgellm deploy device` makes a phone known.

Its certificate goes into `<config dir>/trusted/` and its token into the per-address token file
(`<config dir>/tokens/127.0.0.1_<port>`), so clients (the CLI, the gateway, the push client) reach
it without flags, over TLS, as they reach a deployed phone.
"""

from __future__ import annotations

from edgellm.common.pins import remember_cert
from edgellm.common.server import ServerSecurity
from edgellm.common.tokens import target_token_path, write_secret


def trust_server(security: ServerSecurity, port: int, label: str = "test") -> None:
    """Trust a started server's certificate and keep its token for its address (no-op without TLS)."""
    if security.tls is None:
        return
    remember_cert(security.tls.cert.read_text(), f"{label}-{port}")
    if security.token:
        write_secret(target_token_path(f"127.0.0.1:{port}"), security.token)
