"""Memory admission for LoadModel: refuse a model the phone cannot hold instead of being killed.

The figures are `edgellm.engine.memory_model`'s (the scale bench's); MemAvailable comes from the
telemetry reader (`edgellm.device.telemetry.process.read_meminfo`).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgellm.common.errors import ResourceExhausted
from edgellm.common.manifest import ModelShape
from edgellm.device.telemetry.process import MemInfo
from edgellm.engine.artifact import Artifact
from edgellm.engine.memory_model import MemoryEstimate, estimate, kv_resident_bytes, kv_tokens_within

MIB = 1 << 20


@dataclass(frozen=True)
class MemoryNeed:
    """What loading an artifact is expected to take (the memory model's figures + a margin)."""

    name: str
    shape: ModelShape
    attention_mode: int
    estimate: MemoryEstimate
    margin: int
    bits: int = 4  # the artifact's linears' bits (a smaller quantization exists only above 4)

    @property
    def total(self) -> int:
        """Bytes that must be available."""
        return self.estimate.total + self.margin

    def tokens_within(self, room: int) -> int:
        """The most KV positions (a multiple of 256) that `room` bytes of KV hold."""
        return kv_tokens_within(self.shape, room, self.attention_mode)

    def breakdown(self) -> str:
        """'weights W + runtime R + KV K at N tokens + margin M' in MiB."""
        e = self.estimate
        kv = f"KV {e.kv // MIB} at {e.tokens} tokens"
        if e.load_peak > e.kv:  # loading takes more than running at this context
            kv = f"load peak {e.load_peak // MIB} (more than {kv})"
        return f"weights {e.weights // MIB} + runtime {e.runtime // MIB} + {kv} + margin {self.margin // MIB}"


def kv_bytes(artifact: Artifact, tokens: int, attention_mode: int) -> int:
    """What `tokens` more cached positions of this artifact add at an MNN attention_mode (measured)."""
    return kv_resident_bytes(artifact.manifest.model, tokens, attention_mode)


def memory_need(artifact: Artifact, kv_tokens: int, margin: int, attention_mode: int) -> MemoryNeed:
    """The memory model at kv_tokens positions (the context when 0), plus the margin."""
    shape = artifact.manifest.model
    tokens = min(kv_tokens, artifact.context_length) if kv_tokens else artifact.context_length
    need = estimate(shape, artifact.size_bytes, tokens, attention_mode)
    bits = artifact.manifest.quantization.bits
    return MemoryNeed(artifact.name, shape, attention_mode, need, margin, bits)


def admit(need: MemoryNeed, mem: MemInfo, freed_by_unload: int = 0) -> None:
    """Raise ResourceExhausted unless MemAvailable (+ what replacing the loaded model frees) suffices."""
    have = mem.available_bytes + freed_by_unload
    if need.total <= have:
        return
    raise ResourceExhausted(
        f"not enough memory to load {need.name}: needs {need.total // MIB} MiB ({need.breakdown()}), "
        f"{have // MIB} MiB available; {_advice(need, have)}"
    )


def _advice(need: MemoryNeed, have: int) -> str:
    e = need.estimate
    loads = e.weights + e.runtime + e.load_peak + need.margin <= have
    fit = need.tokens_within(have - need.margin - e.weights - e.runtime) if loads else 0
    smaller = "a 4-bit build (convert --bits 4) or a smaller model" if need.bits > 4 else "a smaller model"
    if fit:
        return (
            f"it would fit with a context of {fit} tokens (--kv-window {fit}, or UpdateConfig "
            f"kv_window); or use {smaller}, or close apps"
        )
    return f"no context fits: use {smaller}, unload the current model, or close apps"


def admit_window(need: MemoryNeed, held_kv: int, mem: MemInfo) -> None:
    """Refuse (ResourceExhausted) a larger KV window than MemAvailable can fill beyond `held_kv` bytes."""
    extra = need.estimate.kv - held_kv + need.margin
    if extra <= mem.available_bytes:
        return
    fit = need.tokens_within(held_kv + mem.available_bytes - need.margin)
    ask = f"at most {fit} tokens" if fit else "a smaller window"
    raise ResourceExhausted(
        f"not enough memory for a KV window of {need.estimate.tokens} tokens on {need.name}: its KV "
        f"needs {need.estimate.kv // MIB} MiB (+ margin {need.margin // MIB}), {held_kv // MIB} MiB "
        f"of it held now, {mem.available_bytes // MIB} MiB available; ask for {ask}, or close apps"
    )
