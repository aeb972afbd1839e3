"""Memory admission for LoadModel: refuse a model the phone cannot hold instead of being killed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.errors import ResourceExhausted
from device_daemon.artifact import Artifact

MIB = 1 << 20


@dataclass(frozen=True)
class MemInfo:
    """The two /proc/meminfo numbers admission needs, in bytes."""

    total: int
    available: int


def read_meminfo(root: Path = Path("/")) -> MemInfo:
    """Parse <root>/proc/meminfo; MemAvailable falls back to MemFree+Cached on old kernels."""
    values: dict[str, int] = {}
    for line in (root / "proc" / "meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key.strip()] = int(fields[0]) * 1024  # kB
    available = values.get("MemAvailable", values.get("MemFree", 0) + values.get("Cached", 0))
    return MemInfo(total=values.get("MemTotal", 0), available=available)


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


def kv_bytes(artifact: Artifact, tokens: int, bytes_per_value: int = 2) -> int:
    """KV cache size for `tokens` positions from the manifest's model shape (Llama defaults if absent)."""
    m = artifact.manifest.get("model", {})
    layers = int(m.get("num_hidden_layers") or m.get("num_layers") or 30)
    kv_heads = int(m.get("num_key_value_heads") or m.get("num_kv_heads") or 3)
    hidden = int(m.get("hidden_size") or 576)
    heads = int(m.get("num_attention_heads") or 9)
    head_dim = int(m.get("head_dim") or hidden // max(heads, 1))
    return 2 * layers * kv_heads * head_dim * tokens * bytes_per_value


def memory_need(artifact: Artifact, kv_tokens: int, margin: int) -> MemoryNeed:
    """Weights (the artifact's bytes) + KV for kv_tokens + margin."""
    tokens = min(kv_tokens, artifact.context_length) if kv_tokens else artifact.context_length
    return MemoryNeed(weights=artifact.size_bytes, kv=kv_bytes(artifact, tokens), margin=margin)


def admit(need: MemoryNeed, mem: MemInfo, freed_by_unload: int = 0) -> None:
    """Raise ResourceExhausted unless MemAvailable (+ what replacing the loaded model frees) suffices."""
    have = mem.available + freed_by_unload
    if need.total > have:
        raise ResourceExhausted(
            f"not enough memory to load: needs {need.total // MIB} MiB (weights {need.weights // MIB} "
            f"+ KV {need.kv // MIB} + margin {need.margin // MIB}), {have // MIB} MiB available; "
            "unload the current model, close apps, or lower --kv-window"
        )
