"""One wrapper around ``MNN.llm`` for scoring and measuring (host evaluation, the conversion gate, benches).

Settings go in as a dict, before ``load()``: pymnn 3.6.1's ``set_config`` json-dumps its argument,
so a JSON *string* is double-encoded, returns True and changes nothing; and MNN reads the runtime
keys (threads, memory, precision, attention_mode, ...) once, inside ``load()`` (docs/engine.md).
The API (``open``, ``encode``, ``forward``, ``reset``) is the device engine's typed adapter's, so
both sides can share one class.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Logits = npt.NDArray[np.float32]


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
    """A loaded MNN LLM runtime (not thread-safe, like MNN itself)."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm

    @classmethod
    def open(cls, config_path: Path, settings: Mapping[str, object]) -> MnnLlm:
        """Create the runtime from an artifact's ``config.json``, apply ``settings``, load the weights."""
        llm = import_mnn_llm().create(str(config_path))
        llm.set_config(dict(settings))  # a dict, before load(): see the module docstring
        if llm.load() is False:
            raise RuntimeError(f"MNN failed to load {config_path.parent}")
        return cls(llm)

    def encode(self, text: str) -> list[int]:
        """The artifact's tokenizer, no template."""
        return [int(t) for t in self._llm.tokenizer_encode(text)]

    def forward(self, ids: list[int]) -> Logits:
        """Append ``ids`` to the KV cache; a copy of the logits ([1, 1, V], or [1, T, V] with all_logits).

        Why copy: Var.read() is a view of MNN's output buffer, which the next forward() overwrites
        in place; keeping views silently turns every row into the last one.
        """
        out = self._llm.forward(ids)
        if out is None:
            raise RuntimeError("MNN forward failed")
        return np.array(out.read(), dtype=np.float32, copy=True)

    def reset(self) -> None:
        """Forget the KV cache."""
        self._llm.reset()


def rows(logits: Logits) -> Logits:
    """Logits as [rows, V] whatever MNN's leading dimensions."""
    return logits.reshape(-1, logits.shape[-1])


def host_threads() -> int:
    """Threads for scoring on this machine: the CPUs we may run on, at most 4."""
    return max(1, min(4, len(os.sched_getaffinity(0))))
