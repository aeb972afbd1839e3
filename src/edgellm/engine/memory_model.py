"""What an MNN model takes in memory (weights, runtime buffers, KV), from the manifest's model facts.

One model for the daemon's admission (`edgellm.device.admission`) and for bench/docs
(`bench/model_fit_table.py`); its constants are fitted to `bench/bench_engine_memory.py` runs of
MNN 3.6.1 on x86 (docs/engine.md, "What a loaded model holds"), named at each constant.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgellm.common.manifest import ModelShape

MIB = 1 << 20
# Bytes of block scale + zero point per block (two fp32: MNN's asymmetric block quantization).
BLOCK_INFO_BYTES = 8
# llm.mnn (the graph), tokenizer.json/.mtok and tokens.bin: ~82 bytes per vocabulary entry
# (SmolLM2's artifact: 4.0 MB of non-weight files for 49,152 tokens).
OTHER_FILE_BYTES_PER_TOKEN = 82
# The constants below are fitted to two bench/bench_engine_memory.py runs, MNN 3.6.1 x86, 2 threads,
# the daemon's 256-token warm-up, then a 1,500-token prefill and decode to 2,048 positions:
# SmolLM2-135M int4 (113.8 MiB artifact) and Qwen2.5-0.5B's shape with SmolLM2's 49,152-token
# vocabulary int4 (312.6 MiB); docs/engine.md, "What a loaded model holds", has the numbers.
# Resident weights per byte of the artifact's weights (use_mmap on shows them alone, as RssFile):
# MNN repacks the int4/int8 blocks for its kernels; 132.9 / 110.0 MiB = 1.21 and 363.0 / 308.8 = 1.18.
WEIGHTS_PER_ARTIFACT_BYTE = 1.21
# Extra resident during load only (VmHWM - VmRSS after load), per lm_head parameter (vocab x hidden):
# 69.8 MiB / 28.3 M = 2.59 B and 109.8 MiB / 44.0 M = 2.61 B; checked on the real Qwen2.5-0.5B
# shape (vocabulary 151,936, /work/scale-cache/scale/qwen2.5-0.5b/rtn): 340.4 MiB, 2.6 predicts 337.6.
LOAD_PEAK_PER_VOCAB_PARAM = 2.6
# MNN's buffers after load and warm-up, beyond the weights: 44.1 and 54.6 MiB; the difference follows
# the MLP width (intermediate size): ~3.3 KB per unit, i.e. ~3 fp32 buffers of [256 tokens, I].
RUNTIME_BASE_BYTES = 38 * MIB
RUNTIME_PER_INTERMEDIATE_BYTES = 3300
RUNTIME_PER_VOCAB_BYTES = 16  # fp32 logits, a few copies (MNN's output, numpy's, the sampler's)
# Growth from the warm-up to N positions = KV_GROWTH x the KV's own size (ModelShape.kv_bytes) +
# PREFILL_PER_INTERMEDIATE x I x N. Solved from the two runs (216.3 and 201.0 MiB at 2,048 positions):
# 2.0 and 10.8 B. Why 2x the KV (read in MNN's source, not isolated by a measurement): MNN grows
# each layer's cache by 64 positions at a time (CPUKVCacheManager::onRealloc, mExpandChunk) into a
# new buffer, and its allocator pools what it frees; glibc's settings change nothing (448.9 vs
# 450.5 MiB). The second term is the prefill's activations (a prompt of 3/4 of N here).
# Both runs have per-layer caches of ~1 MiB; larger models' may grow less: an upper bound there.
KV_GROWTH = 2.0
PREFILL_PER_INTERMEDIATE = 10.8


@dataclass(frozen=True)
class QuantFacts:
    """How the weights are stored: bits and block of the linears and of the lm_head.

    A tied embedding is the lm_head's rows; an untied one is llmexport's bf16 file.
    """

    bits: int = 4
    block: int = 32
    lm_head_bits: int = 8


def linear_params(shape: ModelShape) -> int:
    """Parameters of the transformer blocks' linears (q, k, v, o, gate, up, down)."""
    q = shape.num_heads * shape.head_dim
    kv = shape.num_kv_heads * shape.head_dim
    attention = shape.hidden_size * (2 * q + 2 * kv)
    mlp = 3 * shape.hidden_size * shape.intermediate_size
    return shape.num_layers * (attention + mlp)


def _quantized_bytes(params: int, bits: int, block: int) -> int:
    per_block = BLOCK_INFO_BYTES / block if block else 0.0
    return int(params * (bits / 8 + per_block))


def artifact_bytes(shape: ModelShape, quant: QuantFacts) -> int:
    """Predicted artifact size: quantized linears + lm_head (+ an untied bf16 embedding) + other files."""
    vocab_rows = shape.vocab_size * shape.hidden_size
    size = _quantized_bytes(linear_params(shape), quant.bits, quant.block)
    size += _quantized_bytes(vocab_rows, quant.lm_head_bits, quant.block)
    if not shape.tie_word_embeddings:
        size += vocab_rows * 2  # llmexport's embeddings_bf16.bin
    return size + shape.vocab_size * OTHER_FILE_BYTES_PER_TOKEN


def resident_weight_bytes(shape: ModelShape, size_bytes: int) -> int:
    """Weights MNN holds after load for an artifact of `size_bytes`.

    An untied embedding is not held: MNN's DiskEmbedding reads one row per token from the file.
    """
    held = size_bytes - shape.vocab_size * OTHER_FILE_BYTES_PER_TOKEN
    if not shape.tie_word_embeddings:
        held -= shape.vocab_size * shape.hidden_size * 2
    return int(max(held, 0) * WEIGHTS_PER_ARTIFACT_BYTE)


def runtime_bytes(shape: ModelShape) -> int:
    """MNN's buffers after the daemon's warm-up (no KV beyond it)."""
    return (
        RUNTIME_BASE_BYTES
        + RUNTIME_PER_INTERMEDIATE_BYTES * shape.intermediate_size
        + RUNTIME_PER_VOCAB_BYTES * shape.vocab_size
    )


def load_peak_bytes(shape: ModelShape) -> int:
    """What MNN holds beyond the weights while it loads them (gone once loaded)."""
    return int(LOAD_PEAK_PER_VOCAB_PARAM * shape.vocab_size * shape.hidden_size)


def kv_resident_bytes(shape: ModelShape, tokens: int, attention_mode: int) -> int:
    """What growing to `tokens` cached positions adds to the process (KV and prefill buffers), as measured."""
    kv = shape.kv_bytes(tokens, attention_mode) * KV_GROWTH
    return int(kv + PREFILL_PER_INTERMEDIATE * shape.intermediate_size * tokens)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a loaded model takes at `tokens` cached positions."""

    weights: int
    runtime: int
    kv: int  # the KV cache and the prefill's buffers at `tokens` positions
    tokens: int
    load_peak: int = 0  # held beyond the weights during load only

    @property
    def total(self) -> int:
        """The most the process adds: while loading, or once `tokens` positions are filled."""
        return self.weights + self.runtime + max(self.load_peak, self.kv)


def estimate(shape: ModelShape, size_bytes: int, tokens: int, attention_mode: int) -> MemoryEstimate:
    """The memory model for an artifact of `size_bytes` at `tokens` KV positions."""
    return MemoryEstimate(
        weights=resident_weight_bytes(shape, size_bytes),
        runtime=runtime_bytes(shape),
        kv=kv_resident_bytes(shape, tokens, attention_mode),
        tokens=tokens,
        load_peak=load_peak_bytes(shape),
    )


def kv_tokens_within(shape: ModelShape, room: int, attention_mode: int) -> int:
    """The most KV positions (a multiple of 256, at most the trained context) `room` bytes hold."""
    per_token = kv_resident_bytes(shape, 1 << 16, attention_mode) / (1 << 16)
    tokens = min(int(max(room, 0) / per_token), shape.context_length)
    return tokens - tokens % 256


def largest_context(shape: ModelShape, size_bytes: int, budget: int, attention_mode: int) -> int:
    """The most KV positions that fit `budget` bytes with the weights and runtime; 0 if none."""
    base = estimate(shape, size_bytes, 0, attention_mode)
    if base.total > budget:
        return 0
    return kv_tokens_within(shape, budget - base.weights - base.runtime, attention_mode)


# The daemon process before any model: 63.3 MiB VmRSS idle (`edgellm daemon`, no model, x86), and
# the MNN module it imports at the first load (a bare engine process is 55 MiB before load).
DAEMON_BASE_BYTES = 70 * MIB
FP_KV_MODE = 8  # MNN attention_mode 8: flash attention, float KV (common/runtime.py KV_CACHE_MODES)


@dataclass(frozen=True)
class Prediction:
    """A model's predicted artifact size and daemon RSS (bytes), from its facts alone."""

    artifact: int
    loaded: int  # daemon RSS after load and warm-up
    load_peak: int  # daemon RSS at its highest during load
    at_context: dict[int, int]  # daemon RSS at its peak over a conversation filling N positions

    def fits(self, tokens: int, available: int) -> bool:
        """Whether loading, then filling `tokens` positions, stays within `available` bytes."""
        return max(self.load_peak, self.at_context[tokens]) <= available


def predict(
    shape: ModelShape, quant: QuantFacts, contexts: tuple[int, ...] = (2048, 8192), mode: int = FP_KV_MODE
) -> Prediction:
    """Artifact size, daemon RSS after load and at each context (capped at the trained one)."""
    size = artifact_bytes(shape, quant)
    base = estimate(shape, size, 0, mode)
    loaded = DAEMON_BASE_BYTES + base.weights + base.runtime
    kv = {n: kv_resident_bytes(shape, min(n, shape.context_length), mode) for n in contexts}
    return Prediction(
        artifact=size,
        loaded=loaded,
        load_peak=loaded + base.load_peak,
        at_context={n: loaded + grown for n, grown in kv.items()},
    )
