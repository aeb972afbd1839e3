"""The one adapter around pymnn's untyped `MNN.llm` object: typed calls, nothing else.

Both sides use it: the device engine (`edgellm.engine.mnn`) and the host's scorers, the
conversion gate and `bench/measure_threads.py`, so it lives in `common` (host code may not import
the device). pymnn 3.6.1 ships no type information; the Protocols below describe exactly the
members edgellm uses, so a renamed or removed member shows up here (and in mypy), not deep in a
request. Settings go in as a dict, before ``load()``: pymnn 3.6.1's ``set_config`` json-dumps its
argument, so a JSON *string* is double-encoded, returns True and changes nothing; and MNN reads
the runtime keys (threads, memory, precision, attention_mode, ...) once, inside ``load()``
(docs/engine.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from edgellm.common.errors import FailedPrecondition, Unavailable
from edgellm.common.mnn import c_stdout_to_stderr, import_mnn_llm

Logits = npt.NDArray[np.float32]
T = TypeVar("T")
_NOT_LOADED = -1  # MNN.llm.LlmStatus.NOT_LOADED


class _Var(Protocol):
    def read(self) -> npt.ArrayLike: ...


class _Context(Protocol):
    gen_seq_len: int
    all_seq_len: int
    status: int  # MNN.llm.LlmStatus: -1 NOT_LOADED after a failed load, 0 RUNNING after a good one

    def update(self, **fields: int) -> None: ...


class _CLlm(Protocol):
    def erase_history(self, begin: int, end: int) -> None: ...
    def dump_config(self) -> str: ...


class _PyLlm(Protocol):
    """pymnn's `MNN.llm.LLM` wrapper, as far as edgellm uses it."""

    context: _Context
    _c_obj: _CLlm  # the raw pybind object: erase_history is not on the Python wrapper

    def set_config(self, config: Mapping[str, object]) -> bool: ...
    def load(self) -> bool | None: ...
    def tokenizer_encode(self, text: str) -> Sequence[int]: ...
    def apply_chat_template(self, messages: list[dict[str, str]]) -> str: ...
    def forward(self, ids: list[int]) -> _Var | None: ...
    def reset(self) -> None: ...


class MnnLlm:
    """A loaded MNN LLM runtime with typed methods (not thread-safe, like MNN itself)."""

    def __init__(self, llm: _PyLlm) -> None:
        self._llm = llm

    @classmethod
    def open(cls, config_path: Path, settings: Mapping[str, object]) -> MnnLlm:
        """Create the runtime, apply `settings`, load the weights; MNN's stdout goes to stderr.

        Why a dict and why before load(): pymnn 3.6.1's set_config silently ignores a JSON string
        (returns True, changes nothing), and MNN reads these keys once in load().
        """
        mnn_llm = import_mnn_llm()
        with c_stdout_to_stderr():
            llm: _PyLlm = mnn_llm.create(str(config_path))
            llm.set_config(dict(settings))
            ok = llm.load()
        if ok is False:
            raise Unavailable(f"MNN failed to load {config_path.parent}")
        # Why the status: load() returns None even when the graph could not be read ("Load module
        # failed"); the first forward then dies in native code (SIGSEGV, finding S3). The context's
        # status is NOT_LOADED (-1) exactly then.
        if int(llm.context.status) == _NOT_LOADED:
            raise FailedPrecondition(
                f"MNN could not load the model in {config_path.parent} (its graph or weights are "
                "damaged or for another MNN version); rebuild the artifact with `edgellm convert`"
            )
        return cls(llm)

    def settings(self) -> dict[str, object]:
        """The config MNN runs with: the artifact's files merged with what `open` set."""
        merged: dict[str, object] = json.loads(self._llm._c_obj.dump_config())
        return merged

    def encode(self, text: str) -> list[int]:
        """The artifact's tokenizer, no template."""
        return [int(t) for t in self._llm.tokenizer_encode(text)]

    def apply_chat_template(self, messages: Sequence[tuple[str, str]]) -> str:
        """The artifact's chat template over (role, content) pairs."""
        return str(self._llm.apply_chat_template([{"role": r, "content": c} for r, c in messages]))

    def forward(self, ids: list[int]) -> Logits:
        """Run ids through the model; a copy of the output logits ([1, 1, V], or [1, T, V] with all_logits).

        Why copy: Var.read() is a view of MNN's output buffer, which the next forward() overwrites
        in place; keeping views silently turns every row into the last one.
        """
        out = self._llm.forward(ids)
        if out is None:
            raise Unavailable("MNN forward failed")
        return np.array(out.read(), dtype=np.float32, copy=True)

    def forward_read(self, ids: list[int], use: Callable[[Logits], T]) -> T:
        """Run ids through the model and return ``use(logits)``, the logits read in place.

        ``logits`` is a view of MNN's output buffer, valid only inside ``use`` (the next forward
        overwrites it): no copy of a [T, V] all-logits output (0.5 GB at T=1,024 and Llama-3's
        vocabulary), for a caller that reduces the logits at once (the conversion gate).
        """
        out = self._llm.forward(ids)
        if out is None:
            raise Unavailable("MNN forward failed")
        return use(np.asarray(out.read(), dtype=np.float32))

    def reset(self) -> None:
        """Forget the KV cache (MNN drops it on the next forward)."""
        self._llm.reset()

    def erase_history(self, begin: int, end: int) -> None:
        """Drop cached positions [begin, end); `end` 0 means everything after `begin`."""
        self._llm._c_obj.erase_history(begin, end)

    @property
    def gen_seq_len(self) -> int:
        """Tokens MNN counts as generated since its last reset of the counter."""
        return int(self._llm.context.gen_seq_len)

    @property
    def all_seq_len(self) -> int:
        """MNN's position counter: the RoPE position the next token gets."""
        return int(self._llm.context.all_seq_len)

    def set_all_logits(self, on: bool) -> None:
        """Switch every-position logits on or off after load (see MnnEngine.prefill_all)."""
        self._llm.set_config({"all_logits": on})

    def set_counters(self, **counters: int) -> None:
        """Overwrite MNN's gen_seq_len / all_seq_len counters."""
        self._llm.context.update(**counters)


def rows(logits: Logits) -> Logits:
    """Logits as [rows, V] whatever MNN's leading dimensions."""
    return logits.reshape(-1, logits.shape[-1])


def host_threads() -> int:
    """Threads for scoring on this machine: the CPUs we may run on, at most 4."""
    return max(1, min(4, len(os.sched_getaffinity(0))))
