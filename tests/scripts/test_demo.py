"""`make demo`, the README's first command, end to end: a real daemon on a fresh HOME, the answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_make_demo_starts_a_daemon_and_answers_paris(default_artifact: Path, tmp_path: Path) -> None:
    """A first start as a user's: the daemon makes its token and certificate, the demo trusts it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGELLM_")}
    env["HOME"] = str(tmp_path)
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "--artifact", str(default_artifact)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Paris" in r.stdout
    assert (tmp_path / ".edgellm" / "tls" / "cert.pem").is_file()  # served over TLS, as users get it
