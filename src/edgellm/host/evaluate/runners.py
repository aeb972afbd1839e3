"""Per-token negative log-likelihoods of a document through the two paths a model is used by.

- **prefill**: windows of ``context`` tokens every ``stride`` inside the document, one forward each
  (all logits), scoring each token once — the classic perplexity recipe, and how a prompt is read.
- **decode**: the whole document fed one token per forward from an empty cache, so every scored
  token attends to keys/values read back from the cache — how generated tokens are computed.

The MNN artifact runs through the daemon's own ``MnnEngine`` and ``KvCache`` with the settings
the daemon gives it: the manifest's runtime (for quantize's artifacts precision low, memory low,
dynamic_option 2, fp KV = attention_mode 8), 2 threads, no sliding window. The fp reference is
the Hugging Face model in fp32, its decode path through ``DynamicCache``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgellm.host.evaluate.metrics import log_softmax
from edgellm.host.evaluate.windows import windows

PATHS = ("prefill", "decode")


def token_nll(logits: np.ndarray, targets: Sequence[int]) -> np.ndarray:
    """NLL of ``targets`` [n] under ``logits`` [n, V], float64."""
    logp = log_softmax(logits)
    out: np.ndarray = -logp[np.arange(len(targets)), np.asarray(targets)]
    if not np.isfinite(out).all():
        raise FloatingPointError("non-finite logits")
    return out


class Runner(Protocol):
    """Something that scores a document through both paths."""

    def window(self, ids: list[int]) -> np.ndarray:
        """Logits [T, V] of one forward over ``ids`` from an empty cache."""
        ...

    def stream(self, ids: list[int]) -> np.ndarray:
        """NLL [T-1] of ``ids[1:]``, feeding one token per forward from an empty cache."""
        ...

    def close(self) -> None:
        """Release the model."""
        ...


def prefill_nll(runner: Runner, doc: list[int], context: int, stride: int) -> np.ndarray:
    """NLL [len(doc)-1] of the document's tokens 1.. scored in prefill windows."""
    out = []
    for win in windows(len(doc), context, stride):
        chunk = doc[win.begin : win.end]
        rows = slice(len(chunk) - 1 - win.n_scored, len(chunk) - 1)
        out.append(token_nll(runner.window(chunk)[rows], chunk[-win.n_scored :]))
    return np.concatenate(out)


def score_document(runner: Runner, doc: list[int], path: str, context: int, stride: int) -> np.ndarray:
    """NLL of the document's tokens 1.. through ``path`` (prefill or decode)."""
    if path == "prefill":
        return prefill_nll(runner, doc, context, stride)
    if path == "decode":
        return runner.stream(doc)
    raise ValueError(f"path must be one of {PATHS}, got {path!r}")


class MnnRunner:
    """An MNN artifact loaded the way the daemon loads it (its manifest runtime, 2 threads) + overrides."""

    def __init__(self, artifact: Path, overrides: dict[str, Any] | None = None) -> None:
        from edgellm.engine.artifact import open_artifact
        from edgellm.engine.config import EngineConfig
        from edgellm.engine.mnn import MnnEngine

        opened = open_artifact(artifact)
        # The daemon's settings for this artifact (core/models.py:engine_config without --kv-quant):
        # the manifest's runtime, the daemon's 2 threads. all_logits only changes what a
        # multi-token forward returns; decode steps are one token.
        runtime = opened.manifest.runtime
        base = EngineConfig.for_runtime(
            runtime, threads=EngineConfig().threads, attention_mode=runtime.attention_mode
        )
        config = replace(base, all_logits=True, **(overrides or {}))
        self.config = config
        self.engine = MnnEngine(opened, config)
        self.engine.load()

    def window(self, ids: list[int]) -> np.ndarray:
        """One prefill of ``ids`` after a reset: every position's logits."""
        self.engine.reset()
        return self.engine.prefill_all(ids)

    def stream(self, ids: list[int]) -> np.ndarray:
        """The daemon's generation path: ``KvCache.feed`` of the first token, then ``step`` per token."""
        from edgellm.engine.kv_cache import FeedStats, KvCache
        from edgellm.engine.kv_window import WindowPolicy

        cache = KvCache(self.engine, WindowPolicy())  # the daemon's default: fp KV, no sliding
        stats = FeedStats()
        cache.begin("", ids[:1], stats)
        logits = cache.feed(ids[:1], stats)
        out = np.empty(len(ids) - 1)
        for i, token in enumerate(ids[1:]):
            out[i] = token_nll(logits[None, :], [token])[0]
            if i + 2 < len(ids):
                logits = cache.step(token, stats)
        self.engine.reset()
        return out

    def close(self) -> None:
        """Release the runtime."""
        self.engine.close()


class TorchRunner:
    """A Hugging Face causal LM in fp32 on the CPU."""

    def __init__(self, model: Any) -> None:
        self.model = model.eval()

    def window(self, ids: list[int]) -> np.ndarray:
        """Logits [T, V] of one forward."""
        import torch

        with torch.inference_mode():
            out: np.ndarray = self.model(torch.tensor([ids])).logits[0].float().numpy()
        return out

    def stream(self, ids: list[int]) -> np.ndarray:
        """One token per forward through the model's KV cache (``DynamicCache``)."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache()
        out = np.empty(len(ids) - 1)
        with torch.inference_mode():
            for i, token in enumerate(ids[:-1]):
                res = self.model(torch.tensor([[token]]), past_key_values=cache, use_cache=True)
                out[i] = token_nll(res.logits[0, -1:].float().numpy(), [ids[i + 1]])[0]
        return out

    def close(self) -> None:
        """Nothing to release."""
