"""Daemon configuration: nested frozen dataclasses, one per concern, that own the daemon's settings.

`DaemonConfig` composes six sections (server, security, store, engine, kv, governor). A field with
`option(...)` metadata is an `edgellm daemon` flag: its help, its type (which holds its limits) and
its default live here once. device/cli.py generates the options from them (one help group per
section, in field order), and UpdateConfig checks a new value with the same type (`check_setting`).
Setting names are unique across sections, so `DaemonConfig.of(port=0, threads=1)` and
`config.with_settings(...)` can name a setting without its section.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgellm.common.argtypes import (
    byte_size,
    float_in,
    int_in,
    non_negative_int,
    port_number,
    positive_int,
)
from edgellm.common.cli_options import check_value, enum_option, option, section
from edgellm.common.errors import InvalidArgument
from edgellm.common.security_args import server_security_options
from edgellm.common.targets import DEFAULT_DAEMON_PORT
from edgellm.common.tokens import default_data_dir
from edgellm.device.governor.actuation import GovernorPolicy, ThermalPolicy
from edgellm.device.governor.capacity import CapacityConfig
from edgellm.engine.config import EngineConfig, KvQuant
from edgellm.engine.kv_window import KvMethod, WindowPolicy

_SECURITY = server_security_options("<data dir>/token")
# The engine's and the window's own defaults are the daemon's: taken, not written again.
_ENGINE = EngineConfig()
_WINDOW = WindowPolicy()
_CAPACITY = CapacityConfig()


def parse_kv_tiers(text: str) -> tuple[int, ...]:
    """--kv-tiers "512,1024" -> (512, 1024); blanks are skipped."""
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise InvalidArgument(
            f"--kv-tiers takes token counts such as 512 or 512,1024, got {text!r}"
        ) from None


def _join_tiers(tiers: tuple[int, ...]) -> str:
    return ",".join(str(t) for t in tiers)


@dataclass(frozen=True)
class ServerSettings:
    """Where the daemon listens and how much it lets clients queue and ask."""

    host: str = field(
        default="127.0.0.1", metadata=option("--host", "bind address (off loopback: token and TLS)")
    )
    port: int = field(
        default=DEFAULT_DAEMON_PORT, metadata=option("--port", "port; 0 = any free port", type=port_number)
    )
    queue_size: int = field(
        default=8, metadata=option("--queue-size", "requests that may wait", type=positive_int)
    )
    max_new_tokens_cap: int = field(
        default=2048,
        metadata=option(
            "--max-new-tokens-cap", "largest max_new_tokens a request may ask", type=positive_int
        ),
    )
    max_telemetry_streams: int = field(
        default=8,
        metadata=option("--max-telemetry-streams", "concurrent telemetry streams", type=int),
    )
    max_health_watchers: int = 16  # concurrent Health/Watch streams (open without a token)
    grace_seconds: float = 2.0  # stop(): running calls get this long to finish


@dataclass(frozen=True)
class SecuritySettings:
    """The bearer token and TLS (common/security_args.py owns the flags' text, shared with `host`)."""

    # The bearer token; None: read auth_token_file, else <data_dir>/token.
    auth_token_file: Path | None = field(default=None, metadata=_SECURITY["auth_token_file"])
    auth_token: str | None = field(default=None, metadata=_SECURITY["auth_token"])
    # No token (tests, benchmarks); refused off loopback.
    insecure_loopback: bool = field(default=False, metadata=_SECURITY["insecure_loopback"])
    # PEM certificate chain; with tls_key, the server speaks TLS.
    tls_cert: Path | None = field(default=None, metadata=_SECURITY["tls_cert"])
    tls_key: Path | None = field(default=None, metadata=_SECURITY["tls_key"])
    # Kept for old scripts: a token always comes with <data_dir>/tls (self-signed).
    tls_self_signed: bool = field(default=False, metadata=_SECURITY["tls_self_signed"])


@dataclass(frozen=True)
class StoreSettings:
    """The data directory, the artifact store's limits and the pushes that fill it."""

    data_dir: Path = field(
        default_factory=default_data_dir,
        metadata=option(
            "--data-dir",
            "artifact store, token, daemon state (default ~/.edgellm)",
            type=Path,
            unset_keeps_default=True,
        ),
    )
    # Artifact store quota; None = half the disk free at start (plus what the store holds); 0 = none.
    store_quota_bytes: int | None = field(
        default=None,
        metadata=option(
            "--store-quota",
            "most bytes the artifact store may hold, e.g. 8G; 0 = no quota "
            "(default: what it holds plus half the disk free at start)",
            type=byte_size,
        ),
    )
    # Free disk a push must leave untouched; None = the larger of 1 GiB and 5 % of the filesystem.
    disk_reserve_bytes: int | None = field(
        default=None,
        metadata=option(
            "--disk-reserve",
            "free disk a push must leave to other apps, e.g. 2G (default: 1 GiB or 5 %% of the disk)",
            type=byte_size,
        ),
    )
    # Concurrent PushArtifact streams; more answer RESOURCE_EXHAUSTED.
    max_pushes: int = field(
        default=2, metadata=option("--max-pushes", "concurrent pushes (default %(default)s)", type=int)
    )
    # A push silent this long is stopped and its reservation freed.
    push_idle_timeout_s: float = field(
        default=60.0,
        metadata=option(
            "--push-idle-timeout",
            "seconds a push may send nothing before it is stopped and its disk reservation freed",
            type=float,
        ),
    )
    # After push_rate_grace_s, a slower push is stopped (L8); 0 = off.
    push_min_bytes_per_s: int = field(
        default=64 * 1024,
        metadata=option(
            "--push-min-rate",
            "after the grace, a push slower than this on average is stopped and its reservation "
            "freed, so a drip-fed push cannot hold a slot for ever (0 = off)",
            type=non_negative_int,
            metavar="BYTES_PER_S",
        ),
    )
    # Waiting for the client this long is allowed before the rate counts.
    push_rate_grace_s: float = field(
        default=60.0,
        metadata=option(
            "--push-rate-grace",
            "seconds of waiting for a pushing client before its rate counts",
            type=float,
            metavar="SECONDS",
        ),
    )


@dataclass(frozen=True)
class EngineSettings:
    """Which model loads, and how: threads, speculation, warm-up, memory margin, idle unload."""

    # Artifact directory loaded at start; device/cli.py resolves the flag's word (id, name, path).
    model: Path | None = field(
        default=None,
        metadata=option(
            "--model",
            "model to load at start: an installed artifact's id, id prefix or name (as LoadModel), "
            "an artifact directory, or 'default' (the cached default artifact); "
            "default: the model loaded before the last shutdown, if any",
        ),
    )
    # LoadModel may name a directory outside the store (S6)
    allow_dir_load: bool = field(
        default=False,
        metadata=option(
            "--allow-dir-load",
            "let LoadModel load any artifact directory on this machine, not only installed "
            "(pushed) artifacts; off by default because any client could then load arbitrary files",
            store_true=True,
        ),
    )
    # Pinned inference threads. The flag unset means autotune (device/cli.py), and this count
    # stays the fallback.
    threads: int = field(
        default=_ENGINE.threads,
        metadata=option(
            "--threads",
            "inference threads; default: autotune at load (each candidate count timed, fastest kept)",
            type=positive_int,
            unset_keeps_default=True,
        ),
    )
    autotune: bool = False  # measure thread counts at load and take the fastest (else `threads` is pinned)
    # Longest speculative draft (0 = no speculative decoding); 1, 2, 4 or 8.
    draft_max: int = field(
        default=8,
        metadata=option(
            "--draft-max",
            "longest speculative draft (prompt lookup, verified in one forward); 0 turns it off",
            type=int,
            choices=(0, 1, 2, 4, 8),
        ),
    )
    warmup: bool = field(
        default=True,
        metadata=option("--no-warmup", "skip the warm-up inference after load", negate=True),
    )
    # Warm-up prefill length (capped by the first KV budget); sizes MNN's buffers.
    warmup_tokens: int = field(
        default=256,
        metadata=option(
            "--warmup-tokens",
            "warm-up prefill length (capped by the first KV budget): MNN sizes its buffers to the "
            "largest shapes it has run, so RSS reaches its plateau at load",
            type=positive_int,
        ),
    )
    memory_margin_bytes: int = 256 << 20  # LoadModel keeps this much MemAvailable spare
    keep_alive_s: float = 0.0  # unload after this many idle seconds; 0 = never


@dataclass(frozen=True)
class KvSettings:
    """The KV cache: sliding window, protected front, eviction, precision and growth tiers."""

    # Sliding KV window in tokens; 0 = no sliding (stop at the context length).
    kv_window: int = field(
        default=0,
        metadata=option(
            "--kv-window", "sliding KV window in tokens (0 = whole context)", type=non_negative_int
        ),
    )
    # Protected tokens at the window's front; -1 = the system prompt.
    n_keep: int = field(
        default=_WINDOW.n_keep,
        metadata=option(
            "--n-keep", "protected tokens at the window's front (-1 = the system prompt)", type=int_in(-1)
        ),
    )
    kv_chunk: int = field(
        default=0,
        metadata=option("--kv-chunk", "tokens evicted at once (0 = a quarter window)", type=non_negative_int),
    )
    # erase (keep positions) or reprefill (rebuild the kept tokens)
    kv_method: KvMethod = field(
        default=KvMethod.ERASE,
        metadata=enum_option(
            "--kv-method",
            "slide by erasing in place (keeps positions) or by re-prefilling the kept tokens",
            KvMethod,
        ),
    )
    # KV cache precision over the artifact's own (its manifest's runtime.attention_mode): None keeps
    # the artifact's; fp, int8_k, int8_kv (or int8, the same as int8_kv) override it, logged.
    kv_quant: KvQuant | None = field(
        default=None,
        metadata=enum_option(
            "--kv-quant",
            "KV cache precision over the artifact's own (default: the artifact's, fp unless it was "
            "quantized with --kv); int8 = int8_kv",
            KvQuant,
        ),
    )
    # KV budgets below the window, e.g. (512,): grow only if memory allows.
    kv_tiers: tuple[int, ...] = field(
        default=(),
        metadata=option(
            "--kv-tiers",
            "KV budgets below the window, e.g. 512: a conversation starts there and moves up "
            "only when MemAvailable allows (otherwise it slides within the tier)",
            parse=parse_kv_tiers,
            to_cli=_join_tiers,
        ),
    )
    kv_budget_tokens: int = 4096  # KV positions admission budgets for when kv_window is 0


@dataclass(frozen=True)
class GovernorSettings:
    """The thermal governor, where the OS is read, and (for now) the virtual phone."""

    governor_policy: GovernorPolicy = field(
        default=GovernorPolicy.THERMAL,
        metadata=enum_option("--governor", "governor policy", GovernorPolicy),
    )
    thermal_policy: ThermalPolicy = field(
        default=ThermalPolicy.COMFORT,
        metadata=enum_option(
            "--thermal-policy",
            "comfort: keep the skin under the comfort limit (no firmware throttling); throughput: "
            "never fewer tokens than unmanaged, the firmware may throttle (docs/governor.md)",
            ThermalPolicy,
        ),
    )
    # None: below the phone's first skin trip point. UpdateConfig checks setpoint_c by this type.
    setpoint_c: float | None = field(
        default=None,
        metadata=option(
            "--setpoint", "skin setpoint °C (default: the first skin trip - 2)", type=float_in(20.0, 90.0)
        ),
    )
    # Where thermal zones and cpufreq are read (tests: a fixture tree).
    sysfs_root: Path = field(
        default=Path("/"),
        metadata=option(
            "--sysfs-root",
            "read thermal zones and cpufreq under this root instead of / (a fixture tree, e.g. "
            "tests/fixtures/sysfs/sd8gen3, for emulated or test runs)",
            type=Path,
        ),
    )
    # Phone profile: simulate its thermals and firmware in real time.
    virtual_phone: str | None = field(
        default=None,
        metadata=option(
            "--virtual-phone",
            "simulate a phone's thermals (profile name or JSON; see `edgellm simulate --list`)",
            metavar="PROFILE",
        ),
    )
    virtual_phone_time_scale: float = field(
        default=1.0,
        metadata=option("--time-scale", "virtual phone: simulated s per real s", type=float_in(1e-3)),
    )
    proc_root: Path = Path("/")  # where /proc/meminfo is read (tests point it at a fake tree)
    governor_period_s: float = 1.0  # seconds between governor steps
    # Below this sustainable decode rate: "thermal headroom exhausted" (governor/capacity.py says why 1).
    capacity_floor: float = field(
        default=_CAPACITY.floor_tokens_per_second,
        metadata=option(
            "--capacity-floor",
            "tok/s: a phone that sustains less under its comfort limit is 'thermal headroom exhausted' "
            "and refuses new generations under the comfort policy (0 = never)",
            type=float_in(0.0, 1000.0),
        ),
    )


@dataclass(frozen=True)
class DaemonConfig:
    """Everything `edgellm daemon` can be told at start, by concern."""

    server: ServerSettings = field(
        default_factory=ServerSettings, metadata=section("server", "listening and request limits")
    )
    security: SecuritySettings = field(
        default_factory=SecuritySettings, metadata=section("security", "token and TLS")
    )
    store: StoreSettings = field(
        default_factory=StoreSettings, metadata=section("store", "data directory, artifact store, pushes")
    )
    engine: EngineSettings = field(
        default_factory=EngineSettings, metadata=section("engine", "model, threads, speculation, warm-up")
    )
    kv: KvSettings = field(default_factory=KvSettings, metadata=section("kv cache", "sliding window"))
    governor: GovernorSettings = field(
        default_factory=GovernorSettings, metadata=section("governor", "thermal governor and sensors")
    )
    # Settings the command line gave explicitly (by name): they win over the ones `config set` saved
    # (core/saved_settings.py). Not a value of the configuration, so equality ignores it.
    explicit: frozenset[str] = field(default=frozenset(), compare=False)

    @classmethod
    def of(cls, **settings: Any) -> DaemonConfig:
        """The defaults with some settings changed, each named without its section (port=0, threads=1)."""
        return cls().with_settings(**settings)

    def with_settings(self, **settings: Any) -> DaemonConfig:
        """A copy with these settings changed, each named without its section (TypeError on an unknown)."""
        unknown = settings.keys() - _OWNERS.keys()
        if unknown:
            raise TypeError(f"DaemonConfig has no setting {', '.join(sorted(unknown))}")
        changed: dict[str, Any] = {}
        for name in _SECTIONS:
            mine = {k: v for k, v in settings.items() if _OWNERS[k] == name}
            if mine:
                changed[name] = dataclasses.replace(getattr(self, name), **mine)
        return dataclasses.replace(self, **changed)

    def setting(self, name: str) -> Any:
        """One setting's value, named without its section (KeyError on an unknown)."""
        return getattr(getattr(self, _OWNERS[name]), name)


_SECTION_FIELDS = tuple(f for f in dataclasses.fields(DaemonConfig) if "section" in f.metadata)
_SECTIONS = tuple(f.name for f in _SECTION_FIELDS)
# setting name -> the section that owns it (names are unique across sections; a test checks it)
_OWNERS = {
    f.name: s.name
    for s in _SECTION_FIELDS
    for f in dataclasses.fields(s.default_factory)  # type: ignore[arg-type]
}


def setting_field(name: str) -> dataclasses.Field[Any]:
    """The dataclass field that owns a setting (KeyError if there is none)."""
    owner = next(s for s in _SECTION_FIELDS if s.name == _OWNERS[name])
    return next(f for f in dataclasses.fields(owner.default_factory) if f.name == name)  # type: ignore[arg-type]


def check_setting(name: str, value: object) -> None:
    """Refuse (InvalidArgument) a run-time value that the setting's flag would refuse at start."""
    check_value(name, setting_field(name).metadata, value)
