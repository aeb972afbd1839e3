"""Memory admission for LoadModel: refuse a model the phone cannot hold instead of being killed.

MemAvailable comes from the telemetry reader (`edgellm.device.telemetry.process.read_meminfo`).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgellm.common.errors import ResourceExhausted
from edgellm.device.telemetry.process import MemInfo
from edgellm.engine.artifact import Artifact

MIB = 1 << 20


@dataclass(frozen=True)
class MemoryNeed:
    """What loading an artifact is expected to take."""

    weights: int
    kv: int
    margin: int

    @property
    def total(self) -> int:
        """Bytes that must be available."""
        return self.weights + self.kv + self.margin


def kv_bytes(artifact: Artifact, tokens: int, attention_mode: int) -> int:
    """KV-cache bytes for `tokens` positions of this artifact at an MNN attention_mode."""
    return artifact.manifest.model.kv_bytes(tokens, attention_mode)


def memory_need(artifact: Artifact, kv_tokens: int, margin: int, attention_mode: int) -> MemoryNeed:
    """Weights (the artifact's bytes) + KV for kv_tokens (the context when 0) + margin."""
    tokens = min(kv_tokens, artifact.context_length) if kv_tokens else artifact.context_length
    return MemoryNeed(
        weights=artifact.size_bytes, kv=kv_bytes(artifact, tokens, attention_mode), margin=margin
    )


def admit(need: MemoryNeed, mem: MemInfo, freed_by_unload: int = 0) -> None:
    """Raise ResourceExhausted unless MemAvailable (+ what replacing the loaded model frees) suffices."""
    have = mem.available_bytes + freed_by_unload
    if need.total > have:
        raise ResourceExhausted(
            f"not enough memory to load: needs {need.total // MIB} MiB (weights {need.weights // MIB} "
            f"+ KV {need.kv // MIB} + margin {need.margin // MIB}), {have // MIB} MiB available; "
            "unload the current model, close apps, or lower --kv-window"
        )
