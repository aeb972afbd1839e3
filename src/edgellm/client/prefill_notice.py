"""'prefilling …' on a terminal's stderr while a long prompt is read, so a 40 s wait is not silent."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

CHARS_PER_TOKEN = 4  # English text through SmolLM2's tokenizer (docs/cli.md: 200 KB ≈ 50k tokens)


class PrefillNotice:
    """After DELAY_S without the first token, a self-updating status line on STREAM; erased by done().

    Only on a terminal (enabled defaults to STREAM.isatty()): a pipe or a log gets nothing, and
    stdout never does. The daemon does not report the prompt's token count before the first
    token, so the line estimates it from the characters.
    """

    def __init__(
        self, chars: int, stream: TextIO | None = None, delay_s: float = 1.0, enabled: bool | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.chars = chars
        self.delay_s = delay_s
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.shown = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PrefillNotice:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="prefill-notice", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.done()

    def line(self, elapsed_s: float) -> str:
        """The status text after ELAPSED_S seconds."""
        tokens = max(1, self.chars // CHARS_PER_TOKEN)
        return f"prefilling the prompt ({self.chars:,} characters, ~{tokens:,} tokens)… {elapsed_s:.0f} s"

    def _run(self) -> None:
        start = time.monotonic()
        if self._stop.wait(self.delay_s):
            return
        while True:
            with self._lock:
                if self._stop.is_set():
                    return
                self.stream.write("\r" + self.line(time.monotonic() - start))
                self.stream.flush()
                self.shown = True
            if self._stop.wait(1.0):
                return

    def done(self) -> None:
        """Stop updating and erase the line (idempotent)."""
        with self._lock:
            self._stop.set()
            if self.shown:
                self.stream.write("\r\x1b[K")  # back to column 0, clear to the end of the line
                self.stream.flush()
                self.shown = False
