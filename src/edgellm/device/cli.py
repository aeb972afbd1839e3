"""`edgellm daemon`: run the device daemon in the foreground (never self-daemonising)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from edgellm.common.argtypes import float_in, int_in, non_negative_int, port_number, positive_int
from edgellm.common.auth import require_token_off_loopback, token_from_env
from edgellm.common.errors import InvalidArgument, NotFound
from edgellm.common.paths import resolve_artifact
from edgellm.common.targets import DEFAULT_DAEMON_PORT
from edgellm.device.config import DaemonConfig
from edgellm.device.engine.config import KvQuant
from edgellm.device.governor.actuation import GovernorPolicy
from edgellm.device.kv_window import KvMethod


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `daemon` subcommand."""
    p = sub.add_parser("daemon", help="run the device daemon (gRPC) in the foreground")
    p.add_argument("--host", default="127.0.0.1", help="bind address (off loopback a token is required)")
    p.add_argument("--port", type=port_number, default=DEFAULT_DAEMON_PORT, help="port; 0 = any free port")
    p.add_argument(
        "--model",
        default=None,
        help="artifact directory to load at start, or 'default' (the cached default artifact); "
        "default: the model loaded before the last shutdown, if any",
    )
    p.add_argument(
        "--data-dir", type=Path, default=Path.home() / ".edgellm", help="artifact store and daemon state"
    )
    p.add_argument("--threads", type=positive_int, default=2, help="inference threads")
    p.add_argument("--queue-size", type=positive_int, default=8, help="requests that may wait")
    p.add_argument(
        "--max-new-tokens-cap",
        type=positive_int,
        default=2048,
        help="largest max_new_tokens a request may ask",
    )
    p.add_argument(
        "--kv-window",
        type=non_negative_int,
        default=0,
        help="sliding KV window in tokens (0 = whole context)",
    )
    p.add_argument(
        "--n-keep",
        type=int_in(-1),
        default=4,
        help="protected tokens at the window's front (-1 = the system prompt)",
    )
    p.add_argument(
        "--kv-chunk", type=non_negative_int, default=0, help="tokens evicted at once (0 = a quarter window)"
    )
    p.add_argument(
        "--kv-method",
        choices=("erase", "reprefill"),
        default="erase",
        help="slide by erasing in place (keeps positions) or by re-prefilling the kept tokens",
    )
    p.add_argument(
        "--kv-quant",
        choices=[q.value for q in KvQuant],
        default=None,
        help="KV cache precision over the artifact's own (default: the artifact's, fp unless it was "
        "quantized with --kv); int8 = int8_kv",
    )
    p.add_argument(
        "--kv-tiers",
        default="",
        help="KV budgets below the window, e.g. 512: a conversation starts there and moves up "
        "only when MemAvailable allows (otherwise it slides within the tier)",
    )
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up inference after load")
    p.add_argument(
        "--warmup-tokens",
        type=positive_int,
        default=256,
        help="warm-up prefill length (capped by the first KV budget): MNN sizes its buffers to the "
        "largest shapes it has run, so RSS reaches its plateau at load",
    )
    p.add_argument(
        "--auth-token",
        default=None,
        help="bearer token clients must send (default: $EDGELLM_TOKEN); required off loopback; "
        "visible in `ps`, prefer the variable",
    )
    p.add_argument(
        "--virtual-phone",
        default=None,
        metavar="PROFILE",
        help="simulate a phone's thermals (profile name or JSON; see `edgellm simulate --list`)",
    )
    p.add_argument(
        "--time-scale", type=float_in(1e-3), default=1.0, help="virtual phone: simulated s per real s"
    )
    p.add_argument(
        "--governor", choices=("thermal", "off", "pinned"), default="thermal", help="governor policy"
    )
    p.add_argument(
        "--setpoint", type=float, default=None, help="skin setpoint °C (default: the first skin trip - 2)"
    )
    p.set_defaults(handler=run)


def config_from(ns: argparse.Namespace) -> DaemonConfig:
    """DaemonConfig from parsed arguments."""
    model = resolve_artifact(ns.model) if ns.model else None
    if model is not None and not (model / "manifest.json").is_file():
        hint = (
            "build it with `make artifact` in the checkout, or `edgellm convert --model default -o "
            f"{model}` (a few minutes)"
            if ns.model == "default"
            else "give an artifact directory (one with manifest.json), or 'default'"
        )
        raise NotFound(f"no artifact at {model}: {hint}")
    try:
        tiers = tuple(int(t) for t in ns.kv_tiers.split(",") if t.strip())
    except ValueError:
        raise InvalidArgument(
            f"--kv-tiers takes token counts such as 512 or 512,1024, got {ns.kv_tiers!r}"
        ) from None
    auth_token = ns.auth_token or token_from_env()
    require_token_off_loopback(ns.host, auth_token)  # refuse before loading anything
    return DaemonConfig(
        host=ns.host,
        port=ns.port,
        model=model,
        data_dir=ns.data_dir,
        threads=ns.threads,
        queue_size=ns.queue_size,
        max_new_tokens_cap=ns.max_new_tokens_cap,
        kv_window=ns.kv_window,
        n_keep=ns.n_keep,
        kv_chunk=ns.kv_chunk,
        kv_method=KvMethod(ns.kv_method),
        kv_quant=KvQuant(ns.kv_quant) if ns.kv_quant else None,
        kv_tiers=tiers,
        warmup=not ns.no_warmup,
        warmup_tokens=ns.warmup_tokens,
        auth_token=auth_token,
        virtual_phone=ns.virtual_phone,
        virtual_phone_time_scale=ns.time_scale,
        governor_policy=GovernorPolicy(ns.governor),
        setpoint_c=ns.setpoint,
    )


def run(ns: argparse.Namespace) -> int:
    """Serve until interrupted."""
    from edgellm.device.rpc.server import serve

    asyncio.run(serve(config_from(ns)))
    return 0
