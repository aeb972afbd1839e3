"""Daemon configuration: one frozen dataclass, passed in explicitly."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgellm.common.targets import DEFAULT_DAEMON_PORT
from edgellm.common.tokens import default_data_dir
from edgellm.device.engine.config import KvQuant
from edgellm.device.governor.actuation import GovernorPolicy
from edgellm.device.kv_window import KvMethod


@dataclass(frozen=True)
class DaemonConfig:
    """Everything `edgellm daemon` can be told at start."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_DAEMON_PORT
    model: Path | None = None  # artifact directory loaded at start
    data_dir: Path = field(default_factory=default_data_dir)
    # Artifact store quota; None = half the disk free at start (plus what the store holds); 0 = none.
    store_quota_bytes: int | None = None
    # Free disk a push must leave untouched; None = the larger of 1 GiB and 5 % of the filesystem.
    disk_reserve_bytes: int | None = None
    memory_margin_bytes: int = 256 << 20  # LoadModel keeps this much MemAvailable spare
    kv_budget_tokens: int = 4096  # KV positions admission budgets for when kv_window is 0
    proc_root: Path = Path("/")  # where /proc/meminfo is read (tests point it at a fake tree)
    keep_alive_s: float = 0.0  # unload after this many idle seconds; 0 = never
    threads: int = 2
    autotune: bool = False  # measure thread counts at load and take the fastest (else `threads` is pinned)
    queue_size: int = 8
    max_new_tokens_cap: int = 2048
    kv_window: int = 0  # sliding KV window in tokens; 0 = no sliding (stop at the context length)
    n_keep: int = 4  # protected tokens at the window's front; -1 = the system prompt
    kv_chunk: int = 0  # tokens evicted at once; 0 = a quarter of the window
    kv_method: KvMethod = KvMethod.ERASE  # erase (keep positions) or reprefill (rebuild the kept tokens)
    kv_tiers: tuple[int, ...] = ()  # KV budgets below the window, e.g. (512,): grow only if memory allows
    # KV cache precision over the artifact's own (its manifest's runtime.attention_mode): None keeps
    # the artifact's; fp, int8_k, int8_kv (or int8, the same as int8_kv) override it, logged.
    kv_quant: KvQuant | None = None
    warmup: bool = True
    draft_max: int = 8  # longest speculative draft (0 = no speculative decoding); 1, 2, 4 or 8
    warmup_tokens: int = 256  # warm-up prefill length (capped by the first KV budget); sizes MNN's buffers
    grace_seconds: float = 2.0
    sysfs_root: Path = Path("/")  # where thermal zones and cpufreq are read (tests: a fixture tree)
    virtual_phone: str | None = None  # phone profile: simulate its thermals and firmware in real time
    virtual_phone_time_scale: float = 1.0  # simulated seconds per real second
    governor_policy: GovernorPolicy = GovernorPolicy.THERMAL
    setpoint_c: float | None = None  # None: below the phone's first skin trip point
    governor_period_s: float = 1.0
    auth_token: str | None = None  # the bearer token; None: read auth_token_file, else <data_dir>/token
    auth_token_file: Path | None = None
    insecure_loopback: bool = False  # no token (tests, benchmarks); refused off loopback
    tls_cert: Path | None = None  # PEM certificate chain; with tls_key, the server speaks TLS
    tls_key: Path | None = None
    tls_self_signed: bool = (
        False  # kept for old scripts: a token always comes with <data_dir>/tls (self-signed)
    )
    max_pushes: int = 2  # concurrent PushArtifact streams; more answer RESOURCE_EXHAUSTED
    push_idle_timeout_s: float = 60.0  # a push silent this long is stopped and its reservation freed
    push_min_bytes_per_s: int = 64 * 1024  # after push_rate_grace_s, a slower push is stopped (L8); 0 = off
    push_rate_grace_s: float = 60.0  # waiting for the client this long is allowed before the rate counts
    max_telemetry_streams: int = 8  # concurrent StreamTelemetry subscribers
    max_health_watchers: int = 16  # concurrent Health/Watch streams (open without a token)
    allow_dir_load: bool = False  # LoadModel may name a directory outside the store (S6)
