"""S4 end to end: after `deploy device --artifact` wrote an artifact id to ~/.edgellm/deploy/model,
the real runit `run` script starts the real daemon, which loads that id from its store and
reports SERVING (it used to exit 1, "no artifact at <id>", and runit restarted it in a loop)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from edgellm.common.tls import ClientTls
from edgellm.common.tokens import CONFIG_DIR_ENV, HOME_ENV, TOKEN_ENV
from edgellm.deploy.adb import DeployError
from edgellm.deploy.flow import wait_health
from edgellm.device.store import ArtifactStore, parse_manifest
from tests.deploy.conftest import free_port

RUN = Path(__file__).resolve().parents[2] / "src" / "edgellm" / "deploy" / "termux" / "service" / "run"


def test_s4_service_restarts_serving_an_artifact_id(default_artifact: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = ArtifactStore(home / ".edgellm" / "store")
    m = parse_manifest((default_artifact / "manifest.json").read_bytes())
    store.begin(m)
    for f in m.files:
        part = store.part(m.artifact_id, f.sha256)
        shutil.copyfile(default_artifact / f.path, part)
        store.commit_blob(part, f.sha256)
    store.install(m)
    (home / ".edgellm" / "deploy").mkdir(parents=True)
    (home / ".edgellm" / "deploy" / "model").write_text(m.artifact_id + "\n")  # as deploy writes it
    port = free_port()
    # The session fixture points $EDGELLM_HOME and $EDGELLM_CONFIG_DIR at its own directories;
    # Termux sets neither, and with them the daemon looked for the store there (not under the
    # phone's $HOME), could not resolve the id and exited before listening. Drop them.
    env = {k: v for k, v in os.environ.items() if k not in (HOME_ENV, CONFIG_DIR_ENV, TOKEN_ENV)}
    env |= {
        "HOME": str(home),
        "EDGELLM_PORT": str(port),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    log_path = tmp_path / "service.log"
    # The log goes to a file, not a pipe nobody reads while waiting (a full pipe blocks the daemon).
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(["sh", str(RUN)], env=env, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            cert = home / ".edgellm" / "tls" / "cert.pem"  # made on this first start, before it listens
            deadline = time.monotonic() + 120
            while not cert.is_file() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            try:
                tls = ClientTls(roots=cert.read_bytes())
                status = wait_health(f"127.0.0.1:{port}", timeout=120, want_serving=True, tls=tls)
            except (DeployError, OSError) as e:
                raise AssertionError(f"{e}; rc={proc.poll()}\n{log_path.read_text()[-3000:]}") from e
            assert status == "SERVING"
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    out = log_path.read_bytes()
    assert b"engine_loaded" in out, out[-2000:]
    token = home / ".edgellm" / "token"  # made on this first start, as on a fresh phone
    assert token.is_file() and token.stat().st_mode & 0o777 == 0o600
