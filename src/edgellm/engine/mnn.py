"""The MNN runtime behind one loaded artifact, driven token by token from one worker thread."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edgellm.common.errors import FailedPrecondition, InvalidArgument
from edgellm.common.logs import get_logger
from edgellm.common.mnn_llm import MnnLlm
from edgellm.common.token_table import TokenTable
from edgellm.engine.artifact import Artifact, check_loadable
from edgellm.engine.base import Logits, last_row
from edgellm.engine.config import EngineConfig, verify_lengths
from edgellm.engine.costs import FLOAT_DRAFT_COSTS, W4A8_DRAFT_COSTS, DraftCosts
from edgellm.engine.mnn_paths import artifact_label

log = get_logger(__name__)


class MnnEngine:
    """One MNN LLM (implements `edgellm.engine.base.Engine`). Not thread-safe."""

    def __init__(self, artifact: Artifact, config: EngineConfig) -> None:
        self.artifact = artifact
        self.config = config
        check_loadable(artifact)  # before MNN concatenates any of its config's names (S3)
        try:
            self.tokens = TokenTable(artifact.token_table)
        except ValueError as err:  # a damaged artifact, not a bad request and not a daemon bug
            raise FailedPrecondition(f"artifact {artifact_label(artifact.path)} is damaged: {err}") from err
        self.stop_ids = artifact.stop_token_ids
        self.context_length = artifact.context_length
        self._llm: MnnLlm | None = None
        self.history: list[int] = []  # tokens currently in the KV cache (physical order)
        self.position = 0  # RoPE position the next token gets (MNN's all_seq_len)
        self.load_ms = 0.0
        self.warmup_ms = 0.0

    # -- lifecycle -------------------------------------------------------------------------------
    def load(self) -> None:
        """Create the runtime with our settings (they only apply before load) and load weights."""
        start = time.perf_counter()
        if self.config.scratch_dir:  # MNN's tmp_path: the daemon's own, private directory (L10)
            Path(self.config.scratch_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        overrides = self.config.mnn_overrides()
        self._llm = MnnLlm.open(self.artifact.mnn_config, overrides)
        self.load_ms = (time.perf_counter() - start) * 1000
        log.info(
            "engine_loaded", artifact=str(self.artifact.path), load_ms=round(self.load_ms, 1), **overrides
        )

    def warm_up(self, tokens: int = 8) -> float:
        """Run a dummy prefill of `tokens` tokens + a few decode steps, then forget them.

        The first inference is 3-5x slower (the source article); and MNN grows its buffer pools
        to the largest shapes it has run and keeps them, so a warm-up as long as the largest
        common prefill makes RSS reach its plateau at load instead of over the first ~100
        requests (docs/benchmarks.md, memory soak).
        """
        start = time.perf_counter()
        text = "The quick brown fox jumps over the lazy dog while the sea rolls under the moon. "
        base, n = self.encode(text) or [0], max(tokens, 1)
        ids = (base * (n // len(base) + 1))[:n]
        logits = self.prefill(ids)
        for _ in range(4):
            logits = self.decode(int(np.argmax(logits)))
        # MNN clones a module per verify length on first use (~5 MiB each): do it here, at load.
        for length in verify_lengths(self.draft_max):
            self.verify((ids * length)[:length])
            self.rewind(length)
        self.reset()
        self.warmup_ms = (time.perf_counter() - start) * 1000
        log.info("engine_warm", warmup_ms=round(self.warmup_ms, 1))
        return self.warmup_ms

    def close(self) -> None:
        """Drop the runtime; MNN frees its buffers when the object is collected."""
        self._llm = None
        self.history = []

    @property
    def loaded(self) -> bool:
        """Whether a runtime is live."""
        return self._llm is not None

    @property
    def llm(self) -> MnnLlm:
        """The live runtime (FailedPrecondition before load or after close)."""
        if self._llm is None:
            raise FailedPrecondition("no model loaded")
        return self._llm

    # -- text ------------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Tokenize raw text (no template)."""
        return self.llm.encode(text)

    def apply_chat_template(self, messages: Sequence[tuple[str, str]]) -> str:
        """Render chat messages with the artifact's template, ending with the assistant prompt.

        Why the system check here: the model's template refuses a system message (Gemma-2's
        raise_exception), but MNN's jinja implements raise_exception as a no-op and would render a
        "system" turn the model never saw; the build recorded the refusal in the manifest.
        """
        if self.artifact.manifest.tokenizer.system_role == "refuse" and any(
            r == "system" for r, _ in messages
        ):
            raise InvalidArgument(
                f"the chat template of {self.artifact.name} has no system role: send the instructions "
                "in the first user message instead"
            )
        return self.llm.apply_chat_template(messages)

    def token_bytes(self, token: int) -> bytes:
        """Raw bytes of one token."""
        return self.tokens.bytes_of(token)

    def special_id(self, text: str) -> int | None:
        """Id of the token whose bytes are exactly `text` (e.g. '<|im_start|>'), if any."""
        want = text.encode()
        for token in range(len(self.tokens)):
            if self.tokens.bytes_of(token) == want:
                return token
        return None

    @property
    def vocab_size(self) -> int:
        """Token ids the model scores: its logits' width, the checkpoint's vocab_size.

        Not the token table's length: a vocabulary padded beyond its tokenizer (Qwen2.5: 151,936
        rows for 151,665 tokens) can still generate, and be biased towards, an id with no text;
        that id's piece is empty (`token_bytes`).
        """
        return self.artifact.manifest.model.vocab_size

    # -- compute ---------------------------------------------------------------------------------
    def prefill(self, ids: Sequence[int]) -> Logits:
        """Append ids to the KV cache in one batch; return the last position's logits."""
        return last_row(self._forward(list(ids)))

    def prefill_all(self, ids: Sequence[int]) -> Logits:
        """Like prefill, but return logits for every position: [len(ids), vocab].

        Why switched per call: `all_logits` set at load makes *every* prefill run the LM head on
        every position (49,152 x 576 multiply-adds per prompt token, for nothing on ordinary
        requests). Switched on after load (`set_config`) for this one forward and off again, MNN
        clones the prefill module once, at first use, and the rows are bit-identical to those of
        a runtime loaded with it (measured on the default artifact, 16 tokens: max |diff| 0.0;
        docs/engine.md). Its last row is not a plain prefill's: 0.16 apart on W4A8.
        """
        if self.config.all_logits:
            return self._forward(list(ids))
        llm = self.llm
        llm.set_all_logits(True)
        try:
            return self._forward(list(ids))
        finally:
            llm.set_all_logits(False)

    def decode(self, token: int) -> Logits:
        """Append one token; return the next-token logits."""
        return last_row(self._forward([token]))

    @property
    def draft_max(self) -> int:
        """The longest draft verify() takes (EngineConfig.draft_max)."""
        return self.config.draft_max

    @property
    def draft_costs(self) -> DraftCosts:
        """Fixed forward prices for the draft policy: W4A8 (`memory: low`) or float weights."""
        return W4A8_DRAFT_COSTS if self.config.memory == "low" else FLOAT_DRAFT_COSTS

    @property
    def logit_tolerance(self) -> float:
        """How far verify() logits (and decodes over its tokens) may sit from one-token decodes.

        Why not 0: with `memory: low` MNN 3.6.1 runs W4A8 (dynamically quantized activations), and
        its multi-token forward differs from a one-token decode (spread up to ~1.7, docs/engine.md);
        with float weights (`normal`/`high`) the two are bit-identical.
        """
        return self.config.logit_tolerance if self.config.memory == "low" else 0.0

    def verify(self, ids: Sequence[int]) -> Logits:
        """Append ids in one forward after a prefill; every position's logits, [len(ids), vocab].

        Why no gen_seq_len reset (unlike _forward): MNN computes all rows only in decode mode
        (gen_seq_len > 0) with a speculative_type loaded; each length gets its own module clone,
        which warm_up() creates for the lengths the speculative loop uses.
        """
        if not 1 < len(ids) <= self.draft_max + 1:
            raise ValueError(f"verify takes 2..{self.draft_max + 1} tokens, got {len(ids)}")
        llm = self.llm
        if llm.gen_seq_len == 0:
            raise FailedPrecondition("verify needs a prefill first")
        logits = llm.forward(list(ids))
        self.history.extend(ids)
        self.position += len(ids)
        rows = logits.reshape(-1, logits.shape[-1])
        if rows.shape[0] != len(ids):
            raise FailedPrecondition(f"MNN returned {rows.shape[0]} logits rows for {len(ids)} tokens")
        return rows

    def rewind(self, count: int) -> None:
        """Drop the last `count` cached tokens; earlier tokens keep their positions.

        erase_history(begin, 0) sets MNN's counter to the physical length; after a window erase
        positions run ahead of it, so the counter is put back to our absolute position.
        """
        if not 0 <= count <= len(self.history):
            raise ValueError(f"cannot rewind {count} of {len(self.history)} cached tokens")
        if count == 0:
            return
        keep = len(self.history) - count
        llm = self.llm
        llm.erase_history(keep, 0)
        self.position -= count
        if self.position != keep:
            llm.set_counters(all_seq_len=self.position)
        del self.history[keep:]

    def _forward(self, ids: list[int]) -> Logits:
        llm = self.llm
        if len(ids) > 1 and llm.gen_seq_len > 0:
            # Why: MNN counts every forward as generated (gen_seq_len), and a forward of T > 1
            # tokens with gen_seq_len > 0 runs on a module cloned per distinct T and kept for
            # good (~5 MiB each): a session's next turns grew RSS with every new turn length.
            # MNN's own chat resets the counter at the start of each response; so do we.
            llm.set_counters(gen_seq_len=0)
        logits = llm.forward(ids)
        self.history.extend(ids)
        self.position += len(ids)
        # Shape: [1, 1, V] normally, [1, T, V] with all_logits → [rows, V].
        return logits.reshape(-1, logits.shape[-1])

    def reset(self) -> None:
        """Forget the KV cache (MNN drops it on the next forward)."""
        self.llm.reset()
        self.history = []
        self.position = 0

    def truncate(self, keep: int) -> None:
        """Keep only the first `keep` tokens of the KV cache (positions follow: nothing is kept after)."""
        if keep >= len(self.history):
            return
        if keep == 0:
            self.reset()
            return
        self.llm.erase_history(keep, 0)
        del self.history[keep:]
        self.position = keep

    def erase(self, begin: int, end: int) -> None:
        """Drop cached tokens [begin, end) in place, keeping every kept token's RoPE position.

        Why restore all_seq_len: erase_history compacts MNN's position counter, so new tokens would
        get positions that overlap the kept keys' (which keep their old rotation); perplexity
        went 8 → 64 in a trial. Restoring the counter keeps positions absolute and consistent.
        """
        if not 0 <= begin < end <= len(self.history):
            raise ValueError(f"bad erase range [{begin}, {end}) of {len(self.history)}")
        llm = self.llm
        llm.erase_history(begin, end)
        llm.set_counters(all_seq_len=self.position)
        del self.history[begin:end]
