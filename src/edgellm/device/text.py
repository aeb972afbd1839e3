"""Streaming text assembly: UTF-8-complete deltas and stop strings across token boundaries."""

from __future__ import annotations

import codecs
from dataclasses import dataclass


class Utf8Stream:
    """Turns a stream of token byte strings into text deltas that never split a character."""

    def __init__(self) -> None:
        # errors="replace": a truly invalid sequence becomes U+FFFD instead of wedging the stream.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, data: bytes) -> str:
        """Feed one token's bytes; return the text that is now complete (may be empty)."""
        return self._decoder.decode(data, final=False)

    def flush(self) -> str:
        """End the stream: an incomplete trailing character (cut by max_new_tokens) is dropped.

        Its bytes are not text yet; the response's token_ids still report the tokens.
        """
        self._decoder.reset()
        return ""


@dataclass
class StopResult:
    """Text safe to emit now and, if a stop string matched, which one."""

    text: str
    stop: str | None = None


class StopMatcher:
    """Holds back just enough text to catch stop strings that span token boundaries."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self._hold = max((len(s) for s in self.stops), default=0)
        self._pending = ""

    def push(self, text: str) -> StopResult:
        """Add decoded text; return what can be emitted and the matched stop, if any."""
        if not self.stops:
            return StopResult(text)
        buf = self._pending + text
        first: tuple[int, str] | None = None
        for stop in self.stops:
            at = buf.find(stop)
            if at >= 0 and (first is None or at < first[0]):
                first = (at, stop)
        if first is not None:
            self._pending = ""
            return StopResult(buf[: first[0]], first[1])
        # Keep the longest suffix that is still a prefix of some stop string.
        keep = 0
        for n in range(min(self._hold - 1, len(buf)), 0, -1):
            tail = buf[-n:]
            if any(s.startswith(tail) for s in self.stops):
                keep = n
                break
        self._pending = buf[len(buf) - keep :] if keep else ""
        return StopResult(buf[: len(buf) - keep])

    def flush(self) -> str:
        """Release held-back text at the end of generation."""
        out, self._pending = self._pending, ""
        return out
