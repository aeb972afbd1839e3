"""Things that turn a window of token ids into per-position logits: torch models and MNN artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgellm.common.mnn_llm import MnnLlm, host_threads, rows


class Scorer(Protocol):
    """Per-position logits for a window: ids [T] -> logits [T, V] float32."""

    def __call__(self, ids: list[int]) -> np.ndarray: ...


class TorchScorer:
    """A Hugging Face causal LM in fp32 on the CPU."""

    def __init__(self, model: Any) -> None:
        self.model = model.eval()

    def __call__(self, ids: list[int]) -> np.ndarray:
        """Logits [T, V] of one forward pass."""
        import torch

        with torch.inference_mode():
            out: np.ndarray = self.model(torch.tensor([ids])).logits[0].float().numpy()
        return out


class MnnScorer:
    """The real MNN artifact through ``MNN.llm`` (all logits), reset before every window."""

    def __init__(self, artifact: Path, overrides: dict[str, Any] | None = None) -> None:
        self.artifact = artifact
        # all_logits must be set before load(): forward() then returns every position.
        settings = {"thread_num": host_threads(), "all_logits": True, **(overrides or {})}
        self.llm = MnnLlm.open(artifact / "config.json", settings)

    def __call__(self, ids: list[int]) -> np.ndarray:
        """Logits [T, V] of one prefill."""
        self.llm.reset()
        return rows(self.llm.forward(ids))

    def decode(self, ids: list[int]) -> np.ndarray:
        """Logits [T, V] feeding one token per forward, as generation does (reads the KV cache back).

        Why not prefill-then-decode: in mnn 3.6.1 the first single-token forward after a
        multi-token all-logits prefill from Python did not continue the prefilled context (its
        logits no longer matched the prefill's), so every token goes through the decode path.
        """
        return decode_each(self.llm, ids)

    def tokenize(self, text: str) -> list[int]:
        """The artifact's own tokenizer."""
        return self.llm.encode(text)


def decode_each(llm: MnnLlm, ids: list[int]) -> np.ndarray:
    """From an empty cache, feed ``ids`` one token per forward (the generation path): logits [T, V]."""
    llm.reset()
    # Filled in place: a list of rows then np.concatenate held [T, V] twice (1.2 GB at T=1,024 and
    # Qwen's 151,936-token vocabulary, the conversion gate's peak).
    first = rows(llm.forward([ids[0]]))[-1]
    out = np.empty((len(ids), first.shape[-1]), dtype=first.dtype)
    out[0] = first
    for i, t in enumerate(ids[1:], 1):
        out[i] = rows(llm.forward([t]))[-1]
    return out
