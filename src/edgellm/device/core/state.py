"""What the core reports and accepts, as plain data (the RPC layer maps it to messages)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from edgellm.device.core.autotune import ThreadTuning
from edgellm.device.governor.runtime import GovernorSnapshot, GovernorUpdate
from edgellm.device.telemetry.source import Reading
from edgellm.engine.artifact import Artifact


class EngineState(StrEnum):
    """What the engine is doing."""

    EMPTY = "empty"  # no model loaded
    LOADING = "loading"
    IDLE = "idle"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True)
class LoadInfo:
    """What a load measured."""

    artifact: Artifact
    context_length: int
    load_ms: float
    warmup_ms: float


@dataclass(frozen=True)
class DaemonState:
    """GetStatus: the model, the engine, the queue, the governor."""

    version: str
    engine_state: EngineState
    model: LoadInfo | None
    threads: int
    queue_depth: int
    queue_capacity: int
    max_new_tokens_cap: int
    requests_served: int
    uptime_seconds: float
    kv_window: int
    n_keep: int
    governor: GovernorSnapshot
    thread_tuning: ThreadTuning = field(default_factory=lambda: ThreadTuning(0, pinned=True))
    draft_tokens_total: int = 0
    accepted_draft_tokens_total: int = 0


@dataclass(frozen=True)
class TelemetryFrame:
    """One StreamTelemetry sample: the OS reading plus the engine's and the governor's state."""

    reading: Reading
    governor: GovernorSnapshot
    engine_state: EngineState
    tokens_per_second: float  # live while generating, else the last request's decode rate
    last_ttft_ms: float
    kv_tokens: int = 0  # tokens the engine's KV cache holds
    throttled_seconds: float = 0.0  # seconds spent below the fastest rung
    draft_tokens_total: int = 0
    accepted_draft_tokens_total: int = 0
    evicted_tokens_total: int = 0  # KV tokens the sliding window dropped, since start


@dataclass(frozen=True)
class ModelEntry:
    """An artifact ListModels shows: installed in the store, or a directory the daemon loaded."""

    artifact: Artifact
    loaded: bool


@dataclass(frozen=True)
class SettingRestore:
    """One setting `config reset` put back to its startup value, or could not (`not_restored` says why)."""

    name: str  # UpdateConfigRequest's name (threads, kv_window, ...), or "pins"
    was: str
    now: str
    not_restored: str = ""


@dataclass(frozen=True)
class ConfigUpdate:
    """UpdateConfig: None leaves a field as it is. Validated whole before anything changes."""

    threads: int | None = None
    kv_window: int | None = None
    n_keep: int | None = None
    governor: GovernorUpdate = field(default_factory=GovernorUpdate)
    # forget what earlier updates saved for restarts (core/saved_settings.py) and put back the startup values
    forget_saved: bool = False

    def settings(self) -> dict[str, object]:
        """The daemon settings (DaemonConfig names) this update sets, to check by their flags' types."""
        given = {
            "threads": self.threads,
            "kv_window": self.kv_window,
            "n_keep": self.n_keep,
            "setpoint_c": self.governor.setpoint_c,
            "thermal_policy": self.governor.thermal_policy,
        }
        return {k: v for k, v in given.items() if v is not None}
