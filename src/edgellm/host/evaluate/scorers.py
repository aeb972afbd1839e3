"""Things that turn a window of token ids into per-position logits: torch models and MNN artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgellm.common.mnn_llm import MnnLlm, host_threads
from edgellm.common.mnn_llm import rows as as_rows

ALL = slice(None)


class Scorer(Protocol):
    """Per-position logits for a window: ids [T] -> logits [T, V] float32, or of positions ``rows`` only.

    Each returns an array it owns (never a view of a larger one), so what the caller keeps is the rows.
    """

    def __call__(self, ids: list[int], rows: slice = ALL) -> np.ndarray: ...


class TorchScorer:
    """A Hugging Face causal LM in fp32 on the CPU."""

    def __init__(self, model: Any) -> None:
        self.model = model.eval()

    def __call__(self, ids: list[int], rows: slice = ALL) -> np.ndarray:
        """Logits [T, V] (positions ``rows``) of one forward pass."""
        import torch

        with torch.inference_mode():
            out: np.ndarray = self.model(torch.tensor([ids])).logits[0, rows].float().numpy().copy()
        return out


class MnnScorer:
    """The real MNN artifact through ``MNN.llm`` (all logits), reset before every window."""

    def __init__(self, artifact: Path, overrides: dict[str, Any] | None = None) -> None:
        self.artifact = artifact
        # all_logits must be set before load(): forward() then returns every position.
        settings = {"thread_num": host_threads(), "all_logits": True, **(overrides or {})}
        self.llm = MnnLlm.open(artifact / "config.json", settings)

    def __call__(self, ids: list[int], rows: slice = ALL) -> np.ndarray:
        """Logits [T, V] (positions ``rows``) of one prefill, copied out of MNN's buffer."""
        self.llm.reset()
        return self.llm.forward_read(ids, lambda logits: as_rows(logits)[rows].copy())

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
    out: np.ndarray | None = None
    # Filled in place: a list of rows then np.concatenate held [T, V] twice (1.2 GB at T=1,024 and
    # Qwen's 151,936-token vocabulary).
    for start, part in decode_chunks(llm, ids):
        if out is None:
            out = np.empty((len(ids), part.shape[-1]), dtype=part.dtype)
        out[start : start + len(part)] = part
    assert out is not None, "no ids"
    return out


def decode_chunks(llm: MnnLlm, ids: list[int], chunk: int = 256) -> Iterator[tuple[int, np.ndarray]]:
    """``decode_each`` by ``chunk`` positions: (first position, logits [C, V]) in one reused buffer.

    Use each chunk before asking for the next: the buffer is overwritten. The conversion gate
    scores the decode path this way, never holding its [T, V] logits whole.
    """
    llm.reset()
    buf: np.ndarray | None = None
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        for j, t in enumerate(part):
            row = as_rows(llm.forward([t]))[-1]  # [V]
            if buf is None:
                buf = np.empty((min(chunk, len(ids)), row.shape[-1]), dtype=row.dtype)
            buf[j] = row
        assert buf is not None
        yield start, buf[: len(part)]
