"""Things that turn a window of token ids into per-position logits: torch models and MNN artifacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgellm.common.mnn import import_mnn_llm


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
    """The real MNN artifact through ``MNN.llm``, reset before every window."""

    def __init__(self, artifact: Path, overrides: dict[str, Any] | None = None) -> None:
        mnn_llm = import_mnn_llm()

        self.artifact = artifact
        self.llm = mnn_llm.create(str(artifact / "config.json"))
        # all_logits must be set before load(): forward() then returns every position.
        self.llm.set_config({"all_logits": True, **(overrides or {})})
        self.llm.load()

    def __call__(self, ids: list[int]) -> np.ndarray:
        """Logits [T, V] of one prefill."""
        self.llm.reset()
        out = np.asarray(self.llm.forward(ids).read(), dtype=np.float32)
        return out.reshape(len(ids), -1)

    def decode(self, ids: list[int]) -> np.ndarray:
        """Logits [T, V] feeding one token per forward, as generation does (reads the KV cache back).

        Why not prefill-then-decode: in mnn 3.6.1 the first single-token forward after a
        multi-token all-logits prefill from Python did not continue the prefilled context (its
        logits no longer matched the prefill's), so every token goes through the decode path.
        """
        self.llm.reset()
        rows = [np.asarray(self.llm.forward([t]).read(), dtype=np.float32).reshape(1, -1) for t in ids]
        return np.concatenate(rows)

    def tokenize(self, text: str) -> list[int]:
        """The artifact's own tokenizer."""
        return list(self.llm.tokenizer_encode(text))


def artifact_config(artifact: Path) -> dict[str, Any]:
    """The artifact's runtime config (config.json)."""
    doc: dict[str, Any] = json.loads((artifact / "config.json").read_text(encoding="utf-8"))
    return doc
