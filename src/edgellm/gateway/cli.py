"""`edgellm gateway`: the OpenAI-compatible HTTP API and Prometheus metrics in front of a daemon."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgellm.client.connect_args import add_target, security_from
from edgellm.common.argtypes import positive_int
from edgellm.common.errors import EdgeError, InvalidArgument
from edgellm.common.logs import get_logger
from edgellm.common.tls import ServerTls, ensure_self_signed, fingerprint
from edgellm.common.tokens import config_dir
from edgellm.gateway.config import (
    API_KEY_ENV,
    DEFAULT_PORT,
    GatewayConfig,
    Limits,
    Shedding,
    api_key_from_env,
)
from edgellm.gateway.keys import ensure_gateway_key, gateway_key_path, read_key_file

log = get_logger(__name__)
GATEWAY_TLS_DIR = "gateway-tls"  # in the config dir: the --tls-self-signed certificate and key
_LIMITS = Limits()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `gateway` subcommand."""
    p = sub.add_parser(
        "gateway", help="OpenAI-compatible HTTP API, /health and /metrics in front of a daemon"
    )
    add_target(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    key = p.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key-file", type=Path, default=None,
        help=f"file (mode 600) holding the key clients send as a bearer token (default: ${API_KEY_ENV}, "
        "else the key made on first start in ~/.config/edgellm/gateway-key)",
    )  # fmt: skip
    key.add_argument(
        "--no-api-key", action="store_true",
        help="serve without a key (loopback only: any local process or app can then use the daemon)",
    )  # fmt: skip
    p.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate chain: serve HTTPS")
    p.add_argument("--tls-key", type=Path, default=None, help="PEM private key of --tls-cert")
    p.add_argument(
        "--tls-self-signed", action="store_true",
        help="serve HTTPS with a self-signed certificate made once in ~/.config/edgellm/gateway-tls "
        "(its fingerprint is printed at start)",
    )  # fmt: skip
    p.add_argument(
        "--allowed-host", action="append", default=[],
        help="a host name clients may use in the Host header besides IPs and localhost (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--cors-origin", action="append", default=[],
        help="a browser origin allowed to call the API, e.g. http://localhost:3000 (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--telemetry-period", type=float, default=2.0,
        help="seconds between device telemetry reads for /metrics (default 2)",
    )  # fmt: skip
    p.add_argument(
        "--max-body-bytes", type=positive_int, default=_LIMITS.max_body_bytes,
        help=f"largest request body; larger is a 413 (default {_LIMITS.max_body_bytes})",
    )  # fmt: skip
    p.add_argument(
        "--max-concurrent", type=positive_int, default=_LIMITS.max_concurrent,
        help="completion requests in flight; more is a 429 with Retry-After "
        f"(default {_LIMITS.max_concurrent})",
    )  # fmt: skip
    p.add_argument(
        "--max-tokens-cap", type=positive_int, default=_LIMITS.max_tokens,
        help=f"largest max_tokens a request may ask; more is a 400 (default {_LIMITS.max_tokens})",
    )  # fmt: skip
    p.add_argument(
        "--device", default=None,
        help="a `device` label on every metric /metrics exports (name each phone of a fleet)",
    )  # fmt: skip
    p.add_argument(
        "--shed-when-hot", action=argparse.BooleanOptionalAction, default=True,
        help="answer completion requests 503 with Retry-After while the device's governor is out of "
        "rungs (a fleet's router then sends them elsewhere; docs/fleet.md) (default: on)",
    )  # fmt: skip
    p.add_argument(
        "--hot-retry-after", type=positive_int, default=Shedding().hot_retry_after_s,
        help=f"Retry-After seconds of a hot device's 503 (default {Shedding().hot_retry_after_s})",
    )  # fmt: skip
    p.set_defaults(handler=run)


def _tls_from(ns: argparse.Namespace) -> ServerTls | None:
    if ns.tls_self_signed:
        if ns.tls_cert or ns.tls_key:
            raise InvalidArgument("give --tls-self-signed or --tls-cert/--tls-key, not both")
        names = tuple(n for n in (ns.host, *ns.allowed_host) if n not in ("0.0.0.0", "::", ""))
        return ensure_self_signed(config_dir() / GATEWAY_TLS_DIR, names)
    if (ns.tls_cert is None) != (ns.tls_key is None):
        raise InvalidArgument("--tls-cert and --tls-key go together")
    if ns.tls_cert is None:
        return None
    for p in (ns.tls_cert, ns.tls_key):
        if not p.is_file():
            raise InvalidArgument(f"TLS file {p} not found")
    return ServerTls(ns.tls_cert, ns.tls_key)


def config_from(ns: argparse.Namespace) -> GatewayConfig:
    """GatewayConfig from parsed arguments (makes the key, and a self-signed certificate if asked)."""
    key_file: Path | None = ns.api_key_file
    key = None
    if key_file is not None:
        read_key_file(key_file)  # refuse an empty, linked or group/world-readable file now
    elif not ns.no_api_key:
        key = api_key_from_env()
        if key is None:
            key_file = gateway_key_path()
            ensure_gateway_key(key_file)
    return GatewayConfig(
        target=ns.target,
        daemon_security=security_from(ns),
        host=ns.host,
        port=ns.port,
        api_key=key,
        api_key_file=key_file,
        no_api_key=ns.no_api_key,
        tls=_tls_from(ns),
        allowed_hosts=tuple(ns.allowed_host),
        cors_origins=tuple(ns.cors_origin),
        telemetry_period_s=ns.telemetry_period,
        limits=Limits(
            max_body_bytes=ns.max_body_bytes, max_concurrent=ns.max_concurrent, max_tokens=ns.max_tokens_cap
        ),
        device=ns.device,
        shedding=Shedding(when_hot=ns.shed_when_hot, hot_retry_after_s=ns.hot_retry_after),
    )


def _announce(config: GatewayConfig) -> None:
    """Say where the key is (never the key) and which certificate clients should expect."""
    scheme = "https" if config.tls is not None else "http"
    host = f"[{config.host}]" if ":" in config.host else config.host
    lines = [f"edgellm: gateway: OpenAI base URL {scheme}://{host}:{config.port}/v1"]
    if config.api_key_file is not None:
        lines.append(f"  API key: in {config.api_key_file} (OpenAI SDK: api_key=<its contents>)")
    elif config.api_key:
        lines.append(f"  API key: from ${API_KEY_ENV}")
    else:
        lines.append("  API key: none (--no-api-key): any local process can use the daemon")
    if config.tls is not None:
        pin = fingerprint(config.tls.cert.read_bytes())
        lines.append(f"  TLS certificate: {config.tls.cert} ({pin})")
        log.info("gateway_tls", cert=str(config.tls.cert), fingerprint=pin)
    log.info("gateway_key", where=str(config.api_key_file or (API_KEY_ENV if config.api_key else "none")))
    sys.stderr.write("\n".join(lines) + "\n")


def run(ns: argparse.Namespace) -> int:
    """Serve until interrupted (exit 2 on a configuration it refuses)."""
    try:
        config = config_from(ns)
        config.validate()
    except (EdgeError, OSError) as err:
        sys.stderr.write(f"edgellm: gateway: {err}\n")
        return 2
    try:
        from edgellm.gateway.server import serve  # uvicorn and starlette: the gateway extra only
    except ImportError as err:
        sys.stderr.write(f"edgellm: gateway: {err.name} is missing: pip install 'edgellm[gateway]'\n")
        return 2
    _announce(config)
    serve(config)
    return 0
