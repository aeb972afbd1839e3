"""Runtime settings an engine is loaded with, and the KV precision they encode (no MNN import)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from edgellm.common.errors import FailedPrecondition
from edgellm.common.logs import get_logger

log = get_logger(__name__)


class KvQuant(StrEnum):
    """KV cache precision."""

    FP = "fp"
    INT8 = "int8"


# MNN attention_mode: 8 = flash attention with fp KV; 10 = INT8 keys and values (9 = INT8 keys only).
ATTENTION_MODE = {KvQuant.FP: 8, KvQuant.INT8: 10}


def attention_mode(kv_quant: KvQuant, slides_by_erase: bool) -> int:
    """MNN's attention_mode for a KV precision; refuses INT8 KV with a window slid by erase."""
    if kv_quant == KvQuant.INT8:
        if slides_by_erase:
            # Why refuse: with quantized KV, mnn 3.6.1's erase keeps nothing after the erased
            # range (CPUKVCacheManager::onRealloc) while positions count on: silent garbage.
            raise FailedPrecondition(
                "kv_quant int8 cannot slide the window by erase: MNN 3.6.1 drops every cached token "
                "after an erased range when the KV cache is quantized (docs/engine.md); "
                "use --kv-method reprefill or --kv-quant fp"
            )
        # Measured with mnn 3.6.1 (docs/engine.md): INT8 keys are stored relative to a running
        # max that moves between forwards and is never added back, so chunked prefills take
        # SmolLM2's wikitext-2 perplexity from 10.98 to ~32. Check a device's figure with
        # bench/bench_kv.py before relying on it.
        log.warning("kv_int8_lossy", measured_ppl_fp=10.98, measured_ppl_int8=32.1)
    return ATTENTION_MODE[kv_quant]


@dataclass(frozen=True)
class EngineConfig:
    """Runtime settings applied when the model loads."""

    threads: int = 2
    precision: str = "low"  # MNN: low = fp16/bf16 compute where the CPU has it
    power: str = "normal"  # MNN: high = big cores, low = little cores
    memory: str = "low"  # MNN: low = keep weights quantized, quantize activations at run time
    # MNN dynamic_option 2: quantize activations per block (the weight block) instead of per
    # channel; on SmolLM2 INT4 b32 it moves the first answer token back to torch's (docs/engine.md).
    dynamic_option: int = 2
    attention_mode: int = 8  # 8 = flash attention, fp KV; 9 = INT8 K; 10 = INT8 K and V
    use_mmap: bool = False
    all_logits: bool = False  # prefill returns every position's logits (for scoring text)

    def mnn_overrides(self) -> dict[str, object]:
        """The MNN config keys this config sets (all read once, inside load())."""
        return {
            "thread_num": self.threads,
            "precision": self.precision,
            "power": self.power,
            "memory": self.memory,
            "dynamic_option": self.dynamic_option,
            "attention_mode": self.attention_mode,
            "use_mmap": self.use_mmap,
            "all_logits": self.all_logits,
            "backend_type": "cpu",
        }
