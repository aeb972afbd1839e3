"""One wrapper around ``MNN.llm`` for scoring and measuring (host evaluation, conversion checks, benches).

Settings go in as a dict, before ``load()``: pymnn 3.6.1's ``set_config`` json-dumps its argument,
so a JSON *string* is double-encoded, returns True and changes nothing; and MNN reads the runtime
keys (threads, memory, precision, attention_mode, ...) once, inside ``load()`` (docs/engine.md).
The daemon's engine (``edgellm.device.engine``) drives the same object token by token.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Logits = npt.NDArray[np.float32]


def host_threads() -> int:
    """Threads for scoring on this machine: the CPUs we may run on, at most 4."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def import_mnn_llm() -> Any:
    """``MNN.llm``, imported with C-level stdout sent to stderr.

    Why: the mnn 3.6.1 wheel prints "The device supports: ..." to fd 1 when it loads, which
    would corrupt ``--json`` output on stdout.
    """
    if "MNN.llm" in sys.modules:
        return sys.modules["MNN.llm"]
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        import MNN.llm as mnn_llm
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    return mnn_llm


class MnnLlm:
    """An MNN LLM loaded from an artifact's ``config.json`` with ``settings`` applied before load."""

    def __init__(self, config: Path, settings: Mapping[str, object] | None = None) -> None:
        mnn_llm = import_mnn_llm()
        self.settings: dict[str, object] = {"thread_num": host_threads(), **(settings or {})}
        self._llm = mnn_llm.create(str(config))
        self._llm.set_config(dict(self.settings))  # a dict, before load(): see the module docstring
        if self._llm.load() is False:
            raise RuntimeError(f"MNN failed to load {config}")

    @property
    def all_logits(self) -> bool:
        """Whether forward() returns every position's logits (set ``all_logits`` before load)."""
        return bool(self.settings.get("all_logits", False))

    def forward(self, ids: Sequence[int]) -> Logits:
        """Append ``ids`` to the KV cache; logits [len(ids), V] with all_logits, else [1, V]."""
        out = self._llm.forward(list(ids))
        if out is None:
            raise RuntimeError("MNN forward failed")
        # Why copy: Var.read() is a view of MNN's output buffer, which the next forward()
        # overwrites in place; keeping views silently turns every row into the last one.
        logits: Logits = np.array(out.read(), dtype=np.float32, copy=True)
        return logits.reshape(-1, logits.shape[-1])

    def decode_each(self, ids: Sequence[int]) -> Logits:
        """Feed ``ids`` one token per forward (the generation path): logits [len(ids), V]."""
        return np.concatenate([self.forward([t])[-1:] for t in ids])

    def reset(self) -> None:
        """Forget the KV cache."""
        self._llm.reset()

    def tokenize(self, text: str) -> list[int]:
        """The artifact's own tokenizer (no template)."""
        return [int(t) for t in self._llm.tokenizer_encode(text)]
