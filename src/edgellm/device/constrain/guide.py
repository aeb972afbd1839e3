"""One generation walked through a grammar: mask each step's logits, advance on the sampled token."""

from __future__ import annotations

import time
from types import ModuleType

import numpy as np
import numpy.typing as npt

from edgellm.common.errors import InvalidArgument
from edgellm.device.constrain.constraint import Constraint
from edgellm.device.constrain.library import TokenizerCache, compile_grammar, load_library, parser_limits
from edgellm.engine.artifact import Artifact
from edgellm.engine.base import Logits

_PENALTY = np.array([-np.inf, 0.0], dtype=np.float32)  # added to a logit: forbidden, allowed


class TokenGuide:
    """The grammar state of one request (llguidance's LLMatcher) and what its masks cost."""

    def __init__(self, lib: ModuleType, tokenizer: object, grammar: str, vocab_size: int) -> None:
        self._matcher = lib.LLMatcher(tokenizer, grammar, log_level=0, limits=parser_limits(lib))
        if self._matcher.is_error():
            raise InvalidArgument(f"the constraint is invalid: {self._matcher.get_error()}")
        self._vocab = vocab_size
        self._words = np.zeros((vocab_size + 31) // 32, dtype=np.int32)  # 1 bit per token id
        self._bits = np.zeros(vocab_size, dtype=np.uint8)  # the last mask, one 0/1 byte per token id
        self.mask_seconds: list[float] = []  # per decode step: compute the mask and apply it

    @classmethod
    def start(cls, constraint: Constraint, artifact: Artifact, tokenizers: TokenizerCache) -> TokenGuide:
        """A guide at the grammar's start; FailedPrecondition / InvalidArgument say what is wrong."""
        lib = load_library()
        grammar = compile_grammar(lib, constraint)  # the request's fault first, then the model's
        tokenizer = tokenizers.get(lib, artifact)
        return cls(lib, tokenizer.tokenizer, grammar, tokenizer.vocab_size)

    def mask(self, logits: Logits) -> Logits:
        """A copy of [vocab] logits with every token the grammar forbids at -inf."""
        start = time.perf_counter()
        words = self._words
        # Fills the bitmask in place, without the GIL (the library's own numpy helper does the same).
        self._matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
        self._bits = np.unpackbits(words.view(np.uint8), bitorder="little", count=self._vocab)
        # Why a table lookup and an add rather than np.where: it has no data-dependent branch, so
        # its cost does not depend on the mask's pattern (~40% less than np.where on a scattered one).
        out: Logits = logits[: self._vocab] + _PENALTY[self._bits]
        self.mask_seconds.append(time.perf_counter() - start)
        return out

    def allows(self, token: int) -> bool:
        """Whether the last mask allowed `token`."""
        return 0 <= token < self._vocab and bool(self._bits[token])

    def advance(self, token: int) -> None:
        """Move the grammar past a sampled token (one the last mask allowed)."""
        if not self._matcher.consume_token(token):
            raise InvalidArgument(f"the constraint rejected token {token}: {self._matcher.get_error()}")

    @property
    def complete(self) -> bool:
        """True when the grammar allows nothing more: the output is finished."""
        return bool(self._matcher.is_stopped())

    @property
    def mask_ms(self) -> float:
        """Total milliseconds spent on masks so far."""
        return sum(self.mask_seconds) * 1000


def mask_cost(seconds: list[float]) -> npt.NDArray[np.float64]:
    """Per-token mask costs in microseconds (for benchmarks and logs)."""
    return np.asarray(seconds, dtype=np.float64) * 1e6
