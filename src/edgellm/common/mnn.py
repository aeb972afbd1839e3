"""Import and open MNN's LLM runtime with its C-level stdout kept off ours.

Why: the mnn 3.6.1 wheel prints "The device supports: i8sdot:0, fp16:0, ..." to file descriptor 1
when `MNN.llm` is imported (C printf, so `sys.stdout` redirection does not catch it). That line
would land in `--json` output and in whatever reads the daemon's stdout. Every MNN import goes
through `import_mnn_llm`, and the device also opens and loads the runtime inside
`c_stdout_to_stderr`, so anything MNN prints at load goes to stderr, where logs go.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

_redirect_lock = threading.Lock()


@contextlib.contextmanager
def c_stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr for the duration (process-wide; one caller at a time)."""
    with _redirect_lock:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            os.dup2(2, 1)
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def import_mnn_llm() -> Any:
    """``MNN.llm`` (a device-side dependency, imported where it is used), its import banner on stderr."""
    if "MNN.llm" in sys.modules:
        return sys.modules["MNN.llm"]
    with c_stdout_to_stderr():
        import MNN.llm as mnn_llm
    return mnn_llm
