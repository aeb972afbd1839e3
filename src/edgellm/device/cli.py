"""`edgellm daemon`: run the device daemon in the foreground (never self-daemonising)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from edgellm.common.auth import token_from_env
from edgellm.common.paths import default_artifact_dir
from edgellm.common.targets import DEFAULT_DAEMON_PORT
from edgellm.device.config import DaemonConfig
from edgellm.device.engine.config import KvQuant
from edgellm.device.governor.actuation import GovernorPolicy
from edgellm.device.kv_window import KvMethod


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `daemon` subcommand."""
    p = sub.add_parser("daemon", help="run the device daemon (gRPC)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; use adb forward)")
    p.add_argument("--port", type=int, default=DEFAULT_DAEMON_PORT)
    p.add_argument("--model", default=None, help="artifact directory to load at start, or 'default'")
    p.add_argument("--data-dir", type=Path, default=Path.home() / ".edgellm")
    p.add_argument("--threads", type=int, default=2, help="inference threads (default 2)")
    p.add_argument("--queue-size", type=int, default=8, help="requests that may wait (default 8)")
    p.add_argument("--max-new-tokens-cap", type=int, default=2048)
    p.add_argument("--kv-window", type=int, default=0, help="sliding KV window in tokens (0 = whole context)")
    p.add_argument(
        "--n-keep",
        type=int,
        default=4,
        help="protected tokens at the window's front (-1 = the system prompt)",
    )
    p.add_argument("--kv-chunk", type=int, default=0, help="tokens evicted at once (0 = a quarter window)")
    p.add_argument(
        "--kv-method",
        choices=("erase", "reprefill"),
        default="erase",
        help="slide by erasing in place (keeps positions) or by re-prefilling the kept tokens",
    )
    p.add_argument("--kv-quant", choices=("fp", "int8"), default="fp", help="KV cache precision")
    p.add_argument(
        "--kv-tiers",
        default="",
        help="KV budgets below the window, e.g. 512: a conversation starts there and moves up "
        "only when MemAvailable allows (otherwise it slides within the tier)",
    )
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up inference after load")
    p.add_argument(
        "--warmup-tokens",
        type=int,
        default=256,
        help="warm-up prefill length (capped by the first KV budget): MNN sizes its buffers to the "
        "largest shapes it has run, so RSS reaches its plateau at load",
    )
    p.add_argument(
        "--auth-token",
        default=token_from_env(),
        help="bearer token clients must send (default $EDGELLM_TOKEN); required off loopback",
    )
    p.add_argument(
        "--virtual-phone",
        default=None,
        metavar="PROFILE",
        help="simulate a phone's thermals (profile name or JSON; see `edgellm simulate --list`)",
    )
    p.add_argument("--time-scale", type=float, default=1.0, help="virtual phone: simulated s per real s")
    p.add_argument(
        "--governor", choices=("thermal", "off", "pinned"), default="thermal", help="governor policy"
    )
    p.add_argument("--setpoint", type=float, default=None, help="skin setpoint °C (default: first trip - 2)")
    p.add_argument(
        "--sysfs-root",
        type=Path,
        default=Path("/"),
        help="read thermal zones and cpufreq under this root instead of / (a fixture tree, e.g. "
        "tests/fixtures/sysfs/sd8gen3, for emulated or test runs)",
    )
    p.set_defaults(handler=run)


def config_from(ns: argparse.Namespace) -> DaemonConfig:
    """DaemonConfig from parsed arguments."""
    model: Path | None = None
    if ns.model == "default":
        model = default_artifact_dir()
    elif ns.model:
        model = Path(ns.model)
    if ns.threads < 1:
        raise SystemExit("--threads must be at least 1")
    if ns.queue_size < 1:
        raise SystemExit("--queue-size must be at least 1")
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
        kv_quant=KvQuant(ns.kv_quant),
        kv_tiers=tuple(int(t) for t in ns.kv_tiers.split(",") if t.strip()),
        warmup=not ns.no_warmup,
        warmup_tokens=ns.warmup_tokens,
        auth_token=ns.auth_token,
        virtual_phone=ns.virtual_phone,
        virtual_phone_time_scale=ns.time_scale,
        governor_policy=GovernorPolicy(ns.governor),
        setpoint_c=ns.setpoint,
        sysfs_root=ns.sysfs_root,
    )


def run(ns: argparse.Namespace) -> int:
    """Serve until interrupted."""
    from edgellm.device.rpc.server import serve

    asyncio.run(serve(config_from(ns)))
    return 0
