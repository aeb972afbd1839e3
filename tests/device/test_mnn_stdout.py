"""MNN's C-level prints stay off our stdout (issue 12: "The device supports: i8sdot:0..." on stdout)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BANNER = "The device supports"


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter (MNN prints its banner once per process, at import)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )


def test_c_writes_to_fd_1_inside_the_guard_go_to_stderr() -> None:
    done = run_python(
        "import os, sys\n"
        "from edgellm.common.mnn import c_stdout_to_stderr\n"
        "print('before', flush=True)\n"
        "with c_stdout_to_stderr():\n"
        "    os.write(1, b'from C\\n')\n"
        "print('after')\n"
    )
    assert done.stdout == "before\nafter\n"
    assert done.stderr == "from C\n"


def test_loading_the_engine_prints_nothing_on_stdout(default_artifact: Path) -> None:
    done = run_python(
        "from pathlib import Path\n"
        "from edgellm.common.logs import configure_logging\n"
        "configure_logging()  # logs to stderr, as the daemon does\n"
        "from edgellm.engine.artifact import open_artifact\n"
        "from edgellm.engine.config import EngineConfig\n"
        "from edgellm.engine.mnn import MnnEngine\n"
        f"engine = MnnEngine(open_artifact(Path({str(default_artifact)!r})), EngineConfig(threads=1))\n"
        "engine.load()\n"
        "print(len(engine.encode('hello')) > 0)\n"
    )
    assert done.stdout == "True\n"
    assert BANNER in done.stderr  # still visible, where logs go
