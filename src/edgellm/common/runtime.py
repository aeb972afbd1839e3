"""The MNN runtime settings an artifact carries, and the KV-cache bytes they imply: one owner for both.

The host writes these settings into the artifact twice from this one object: as keys of MNN's
``config.json`` (so any MNN user gets them) and as the manifest's ``runtime`` section (so the
device can check and report them). The daemon starts from them (``device/core/models.py:engine_config``)
and overrides only what its own flags say, logging each override.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# KV-cache precision by name -> MNN ``attention_mode`` (flash attention x 8 + KV mode).
KV_CACHE_MODES: dict[str, int] = {"fp": 8, "int8_k": 9, "int8_kv": 10}
# `edgellm daemon --kv-quant int8` predates the three-way vocabulary; it always meant K and V.
KV_CACHE_ALIASES: dict[str, str] = {"int8": "int8_kv"}
MEMORY_MODES = ("low", "normal", "high")
PRECISIONS = ("low", "normal", "high")
DYNAMIC_OPTIONS = (0, 1, 2)

# Bytes per cached key / value element, by precision.
# Why 4 for fp: the x86 mnn 3.6.1 wheel has no fp16 CPU kernels and keeps the KV in fp32
# (docs/engine.md: ~46 KB per cached SmolLM2 token = 2 x 30 layers x 3 heads x 64 x 4 bytes);
# an ARMv8.2 phone with precision "low" stores fp16 (2 bytes), so 4 is the safe budget for both.
FP_KV_BYTES = 4
INT8_KV_BYTES = 1


def kv_cache_mode(name: str) -> int:
    """MNN ``attention_mode`` for a KV-cache name (``fp``, ``int8_k``, ``int8_kv`` or ``int8``)."""
    key = KV_CACHE_ALIASES.get(name, name)
    if key not in KV_CACHE_MODES:
        known = sorted([*KV_CACHE_MODES, *KV_CACHE_ALIASES])
        raise ValueError(f"KV cache must be one of {known}, got {name!r}")
    return KV_CACHE_MODES[key]


def kv_cache_name(attention_mode: int) -> str:
    """The KV-cache name of an MNN ``attention_mode`` (8 -> ``fp``)."""
    for name, mode in KV_CACHE_MODES.items():
        if mode == attention_mode:
            return name
    raise ValueError(f"attention_mode must be one of {sorted(KV_CACHE_MODES.values())}, got {attention_mode}")


def kv_value_bytes(attention_mode: int) -> tuple[int, int]:
    """Bytes per cached (key, value) element for an ``attention_mode`` (9: INT8 keys, 10: both)."""
    kv_cache_name(attention_mode)  # refuse an unknown mode
    key = INT8_KV_BYTES if attention_mode in (9, 10) else FP_KV_BYTES
    value = INT8_KV_BYTES if attention_mode == 10 else FP_KV_BYTES
    return key, value


@dataclass(frozen=True)
class Runtime:
    """MNN runtime keys an artifact is built, measured and served with (all read once, in ``load()``)."""

    # low: weights stay packed and activations are quantized on the fly (W4A8); normal/high unpack
    # the weights to floats at load (RSS 237 -> 690 MB, decode ~3x slower; docs/engine.md).
    memory: str = "low"
    precision: str = "low"  # low: fp16/bf16 compute where the CPU has it
    # Why 2: activations are quantized per weight block instead of per channel; SmolLM2 INT4 b32
    # went from 11.397 to 10.993 perplexity (torch 10.964) and answers "Paris" again (docs/engine.md).
    dynamic_option: int = 2
    attention_mode: int = KV_CACHE_MODES["fp"]  # 8 fp KV, 9 INT8 keys, 10 INT8 keys and values

    @classmethod
    def for_kv_cache(cls, kv_cache: str) -> Runtime:
        """The default settings with the named KV-cache precision."""
        return cls(attention_mode=kv_cache_mode(kv_cache))

    @property
    def kv_cache(self) -> str:
        """The KV-cache precision's name (``fp``, ``int8_k``, ``int8_kv``)."""
        return kv_cache_name(self.attention_mode)

    def __post_init__(self) -> None:
        if self.memory not in MEMORY_MODES:
            raise ValueError(f"memory must be one of {MEMORY_MODES}, got {self.memory!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.dynamic_option not in DYNAMIC_OPTIONS:
            raise ValueError(f"dynamic_option must be one of {DYNAMIC_OPTIONS}, got {self.dynamic_option!r}")
        kv_cache_name(self.attention_mode)

    def mnn_config(self) -> dict[str, Any]:
        """The keys as MNN's ``config.json`` / ``Llm.set_config`` spell them."""
        return asdict(self)


DEFAULT_RUNTIME = Runtime()
