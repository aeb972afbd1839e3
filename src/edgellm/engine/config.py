"""Runtime settings an engine is loaded with, and the KV precision they encode (no MNN import).

The artifact carries its MNN runtime settings (`edgellm.common.runtime.Runtime`, the manifest's
``runtime``); the daemon starts from them and overrides only the KV precision, when
``--kv-quant`` asks for one, logging the override.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from edgellm.common.errors import FailedPrecondition
from edgellm.common.logs import get_logger
from edgellm.common.runtime import DEFAULT_RUNTIME, KV_CACHE_MODES, Runtime, kv_cache_mode, kv_cache_name

log = get_logger(__name__)


class KvQuant(StrEnum):
    """KV cache precision the daemon may impose over the artifact's (common/runtime.py's names)."""

    FP = "fp"
    INT8 = "int8"  # the same as INT8_KV: `--kv-quant int8` predates the three-way vocabulary
    INT8_K = "int8_k"
    INT8_KV = "int8_kv"


def attention_mode(runtime: Runtime, kv_quant: KvQuant | None, slides_by_erase: bool) -> int:
    """MNN's attention_mode: the artifact's, or `kv_quant`'s over it (logged as `runtime_override`).

    A quantized KV cache with a window slid by erase is refused (FAILED_PRECONDITION).
    """
    mode = runtime.attention_mode
    if kv_quant is not None:
        mode = kv_cache_mode(kv_quant)
        if mode != runtime.attention_mode:
            # The daemon's flag wins over what the artifact was built with: say so, once per load.
            log.info(
                "runtime_override",
                key="attention_mode",
                artifact=runtime.attention_mode,
                daemon=mode,
                reason="edgellm daemon --kv-quant",
            )
    if mode == KV_CACHE_MODES["fp"]:
        return mode
    if slides_by_erase:
        # Why refuse: with quantized KV, mnn 3.6.1's erase keeps nothing after the erased
        # range (CPUKVCacheManager::onRealloc) while positions count on: silent garbage.
        raise FailedPrecondition(
            f"KV cache {kv_cache_name(mode)} cannot slide the window by erase: MNN 3.6.1 drops "
            "every cached token after an erased range when the KV cache is quantized "
            "(docs/engine.md); use --kv-method reprefill or --kv-quant fp"
        )
    # Measured with mnn 3.6.1 (docs/engine.md): INT8 keys are stored relative to a running
    # max that moves between forwards and is never added back, so chunked prefills take
    # SmolLM2's wikitext-2 perplexity from 10.98 to ~32. Check a device's figure with
    # bench/bench_kv.py before relying on it.
    log.warning("kv_int8_lossy", attention_mode=mode, measured_ppl_fp=10.98, measured_ppl_int8=32.1)
    return mode


# Draft lengths the speculative loop uses: few distinct verify shapes, because MNN keeps one
# module clone (~5 MiB) per forward length it has seen in decode mode.
DRAFT_LENGTHS = (1, 2, 4, 8)


def verify_lengths(draft_max: int) -> list[int]:
    """Forward lengths (draft + the fed token) verify() runs with for a draft_max."""
    return [k + 1 for k in DRAFT_LENGTHS if k <= draft_max]


@dataclass(frozen=True)
class EngineConfig:
    """Runtime settings applied when the model loads."""

    threads: int = 2
    power: str = "normal"  # MNN: high = big cores, low = little cores
    # The artifact's runtime keys (edgellm.common.runtime.Runtime says what each does); the daemon
    # builds this from the artifact's manifest (core/models.py:engine_config), these are only defaults.
    precision: str = DEFAULT_RUNTIME.precision
    memory: str = DEFAULT_RUNTIME.memory
    dynamic_option: int = DEFAULT_RUNTIME.dynamic_option
    attention_mode: int = DEFAULT_RUNTIME.attention_mode
    # Off, measured (docs/engine.md, "What a loaded model holds"): MNN 3.6.1's use_mmap copies the
    # repacked weights into new 1 GiB sparse files under tmp_path and maps them writable; it does
    # not map the artifact. Same RSS (SmolLM2 208 vs 207 MiB), weights written to flash at every
    # load, and MemAvailable would count them as free page cache, misleading admission.
    use_mmap: bool = False
    all_logits: bool = False  # prefill returns every position's logits (for scoring text)
    # Longest speculative draft verify() takes (0 = no verify). Loads MNN's lookahead mode, which
    # makes a multi-token forward *after* the prefill compute the LM head for every position (the
    # model's logits_index input) while prefills keep computing it for the last one only.
    draft_max: int = 0
    # Bound on how far a verified row's logits (or a decode over verified tokens) sit from plain
    # decoding's: max - min of the difference over the vocabulary. Measured on SmolLM2 INT4 b32,
    # W4A8, x86, 59 prompts x 96 tokens (bench/bench_spec_margin.py): spread p50 0.93-1.10, p99 1.5-2.2,
    # max 2.74 (over 4,447 positions); the gate
    # keeps a margin above it. Greedy speculation accepts a token only when it leads by more.
    logit_tolerance: float = 3.5
    # A directory the daemon owns (<data_dir>/mnn-tmp) for MNN's tmp_path; "" outside a daemon.
    scratch_dir: str = ""

    @classmethod
    def for_runtime(cls, runtime: Runtime, threads: int, attention_mode: int) -> EngineConfig:
        """The artifact's runtime settings, with the daemon's threads and KV precision."""
        return cls(
            threads=threads,
            precision=runtime.precision,
            memory=runtime.memory,
            dynamic_option=runtime.dynamic_option,
            attention_mode=attention_mode,
        )

    def mnn_overrides(self) -> dict[str, object]:
        """The MNN config keys this config sets (all read once, inside load()).

        They are merged over the artifact's own config.json, so they also switch off what an
        artifact must not choose (finding L10): MNN 3.6.1's LlmConfig reads use_cached_mmap
        (default true), kvcache_mmap and use_mmap to decide whether to write weight and KV files,
        under tmp_path (default "", the process's directory), and prefix_cache_path names the
        prefix cache's directory there. All writing is off, tmp_path is the daemon's own directory,
        and the prefix cache keeps MNN's default relative name inside it.
        """
        return {
            "thread_num": self.threads,
            "precision": self.precision,
            "power": self.power,
            "memory": self.memory,
            "dynamic_option": self.dynamic_option,
            "attention_mode": self.attention_mode,
            "use_mmap": self.use_mmap,
            "use_cached_mmap": False,
            "kvcache_mmap": False,
            "tmp_path": self.scratch_dir,
            "prefix_cache_path": "prefixcache",
            "all_logits": self.all_logits,
            "backend_type": "cpu",
            **self._speculative(),
        }

    def _speculative(self) -> dict[str, object]:
        if self.draft_max <= 0:
            return {}
        # Why lookahead: Llm::forwardRaw (mnn 3.6.1) asks for every position's logits when
        # gen_seq_len > 0 and a speculative_type is set (mInSpec); we only borrow that switch and
        # the ready module for draft_predict_length + 1 tokens, never MNN's own generate().
        return {"speculative_type": "lookahead", "draft_predict_length": self.draft_max}
