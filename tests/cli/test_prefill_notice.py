"""The prefill notice: a status line on a terminal's stderr until the first token, then erased."""

from __future__ import annotations

import io
import threading

from edgellm.client.prefill_notice import PrefillNotice


class _Terminal(io.StringIO):
    """A StringIO that says it is a terminal (a fake: the test has no tty), and tells when written."""

    def __init__(self) -> None:
        super().__init__()
        self.written = threading.Event()

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        n = super().write(s)
        self.written.set()
        return n


def test_a_slow_prefill_shows_its_size_and_the_line_is_erased_at_the_first_token() -> None:
    term = _Terminal()
    with PrefillNotice(40_000, stream=term, delay_s=0.0) as notice:
        assert term.written.wait(10)
        notice.done()
    text = term.getvalue()
    assert text.startswith("\rprefilling the prompt (40,000 characters, ~10,000 tokens)…")
    assert text.endswith("\r\x1b[K")  # erased, so the answer starts at column 0


def test_a_pipe_gets_no_notice_and_a_fast_first_token_none_either() -> None:
    pipe = io.StringIO()  # isatty() is False
    with PrefillNotice(40_000, stream=pipe, delay_s=0.0):
        pass
    assert pipe.getvalue() == ""
    term = _Terminal()
    with PrefillNotice(10, stream=term, delay_s=5.0):
        pass  # the first token came before the delay
    assert term.getvalue() == ""
