"""`edgellm daemon`: run the device daemon in the foreground (never self-daemonising)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from edgellm.common.argtypes import byte_size, float_in, int_in, non_negative_int, port_number, positive_int
from edgellm.common.errors import InvalidArgument, NotFound
from edgellm.common.paths import resolve_artifact
from edgellm.common.security_args import add_server_security
from edgellm.common.targets import DEFAULT_DAEMON_PORT
from edgellm.device.config import DaemonConfig
from edgellm.device.engine.config import KvQuant
from edgellm.device.governor.actuation import GovernorPolicy
from edgellm.device.kv_window import KvMethod


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `daemon` subcommand."""
    p = sub.add_parser("daemon", help="run the device daemon (gRPC) in the foreground")
    p.add_argument("--host", default="127.0.0.1", help="bind address (off loopback: token and TLS)")
    p.add_argument("--port", type=port_number, default=DEFAULT_DAEMON_PORT, help="port; 0 = any free port")
    p.add_argument(
        "--model",
        default=None,
        help="model to load at start: an installed artifact's id, id prefix or name (as LoadModel), "
        "an artifact directory, or 'default' (the cached default artifact); "
        "default: the model loaded before the last shutdown, if any",
    )
    p.add_argument(
        "--allow-dir-load",
        action="store_true",
        help="let LoadModel load any artifact directory on this machine, not only installed "
        "(pushed) artifacts; off by default because any client could then load arbitrary files",
    )
    p.add_argument(
        "--data-dir", type=Path, default=None, help="artifact store, token, daemon state (default ~/.edgellm)"
    )
    p.add_argument(
        "--store-quota",
        type=byte_size,
        default=None,
        help="most bytes the artifact store may hold, e.g. 8G; 0 = no quota "
        "(default: what it holds plus half the disk free at start)",
    )
    p.add_argument(
        "--disk-reserve",
        type=byte_size,
        default=None,
        help="free disk a push must leave to other apps, e.g. 2G (default: 1 GiB or 5 %% of the disk)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="inference threads; default: autotune at load (each candidate count timed, fastest kept)",
    )
    p.add_argument(
        "--draft-max",
        type=int,
        choices=(0, 1, 2, 4, 8),
        default=8,
        help="longest speculative draft (prompt lookup, verified in one forward); 0 turns it off",
    )
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
    add_server_security(p, "<data dir>/token")
    p.add_argument("--max-pushes", type=int, default=2, help="concurrent pushes (default 2)")
    p.add_argument(
        "--push-idle-timeout",
        type=float,
        default=60.0,
        help="seconds a push may send nothing before it is stopped and its disk reservation freed",
    )
    p.add_argument(
        "--push-min-rate",
        type=non_negative_int,
        default=DaemonConfig.push_min_bytes_per_s,
        metavar="BYTES_PER_S",
        help="after the grace, a push slower than this on average is stopped and its reservation "
        "freed, so a drip-fed push cannot hold a slot for ever (0 = off)",
    )
    p.add_argument(
        "--push-rate-grace",
        type=float,
        default=DaemonConfig.push_rate_grace_s,
        metavar="SECONDS",
        help="seconds of waiting for a pushing client before its rate counts",
    )
    p.add_argument("--max-telemetry-streams", type=int, default=8, help="concurrent telemetry streams")
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
    model = resolve_artifact(ns.model) if ns.model else None
    # A directory (a path, or 'default') must exist now; any other word is resolved in the store
    # once it is open, as LoadModel resolves it (S4: the deployed service passes an artifact id).
    looks_like_dir = ns.model == "default" or (model is not None and ("/" in ns.model or model.is_dir()))
    if model is not None and looks_like_dir and not (model / "manifest.json").is_file():
        hint = (
            "build it with `make artifact` in the checkout, or `edgellm convert --model default -o "
            f"{model}` (a few minutes)"
            if ns.model == "default"
            else "give an artifact directory (one with manifest.json), an installed artifact's id or "
            "name, or 'default'"
        )
        raise NotFound(f"no artifact at {model}: {hint}")
    try:
        tiers = tuple(int(t) for t in ns.kv_tiers.split(",") if t.strip())
    except ValueError:
        raise InvalidArgument(
            f"--kv-tiers takes token counts such as 512 or 512,1024, got {ns.kv_tiers!r}"
        ) from None
    if ns.max_pushes < 1 or ns.max_telemetry_streams < 1 or ns.push_idle_timeout <= 0:
        raise SystemExit("--max-pushes and --max-telemetry-streams must be >= 1, --push-idle-timeout > 0")
    extra = {"data_dir": ns.data_dir} if ns.data_dir is not None else {}
    return DaemonConfig(
        host=ns.host,
        port=ns.port,
        model=model,
        **extra,
        threads=ns.threads or 2,
        autotune=ns.threads is None,
        draft_max=ns.draft_max,
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
        max_pushes=ns.max_pushes,
        push_idle_timeout_s=ns.push_idle_timeout,
        push_min_bytes_per_s=ns.push_min_rate,
        push_rate_grace_s=ns.push_rate_grace,
        max_telemetry_streams=ns.max_telemetry_streams,
        auth_token=ns.auth_token,
        auth_token_file=ns.auth_token_file,
        insecure_loopback=ns.insecure_loopback,
        tls_cert=ns.tls_cert,
        tls_key=ns.tls_key,
        tls_self_signed=ns.tls_self_signed,
        virtual_phone=ns.virtual_phone,
        virtual_phone_time_scale=ns.time_scale,
        governor_policy=GovernorPolicy(ns.governor),
        setpoint_c=ns.setpoint,
        sysfs_root=ns.sysfs_root,
        allow_dir_load=ns.allow_dir_load,
        store_quota_bytes=ns.store_quota,
        disk_reserve_bytes=ns.disk_reserve,
    )


def run(ns: argparse.Namespace) -> int:
    """Serve until interrupted."""
    from edgellm.device.rpc.server import serve

    asyncio.run(serve(config_from(ns)))
    return 0
