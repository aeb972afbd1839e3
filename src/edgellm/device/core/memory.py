"""Memory admission for a load or a larger KV window: whether MemAvailable holds the model."""

from __future__ import annotations

from edgellm.device.admission import admit, admit_window, kv_bytes, memory_need
from edgellm.device.config import DaemonConfig
from edgellm.device.telemetry.process import read_meminfo
from edgellm.engine.artifact import Artifact


def check_memory(config: DaemonConfig, artifact: Artifact, kv_mode: int, freed_bytes: int) -> None:
    """Refuse (ResourceExhausted) a model that MemAvailable cannot hold with its KV budget.

    The budget is --kv-window, else kv_budget_tokens: LoadModelRequest names only the model, so
    a load has no context of its own to ask for. `kv_mode` is the MNN attention_mode the load will
    use (it sets the KV bytes per token); `freed_bytes` is what unloading the model in the engine
    gives back.
    """
    kv, margin = config.kv, config.engine.memory_margin_bytes
    need = memory_need(artifact, kv.kv_window or kv.kv_budget_tokens, margin, kv_mode)
    admit(need, read_meminfo(config.governor.proc_root), freed_bytes)


def check_window(config: DaemonConfig, artifact: Artifact, kv_mode: int, window: int, held: int) -> None:
    """Refuse (ResourceExhausted) a KV window whose cache MemAvailable cannot fill.

    `held` is the number of positions cached now (their memory is already taken).
    """
    need = memory_need(artifact, window, config.engine.memory_margin_bytes, kv_mode)
    admit_window(need, kv_bytes(artifact, held, kv_mode), read_meminfo(config.governor.proc_root))


def can_hold_kv(config: DaemonConfig, artifact: Artifact, extra_tokens: int, kv_mode: int) -> bool:
    """Whether MemAvailable covers `extra_tokens` more KV positions at `kv_mode`, plus the margin."""
    need = kv_bytes(artifact, extra_tokens, kv_mode) + config.engine.memory_margin_bytes
    return read_meminfo(config.governor.proc_root).available_bytes >= need
