"""The gateway on the phone, emulated: the daemon and the gateway's runit script under qemu-aarch64.

As `edgellm deploy device --gateway` sets a phone up: the daemon with its own token and TLS
certificate (made on its first start in ~/.edgellm), the API key in ~/.config/edgellm/gateway-key
(0600, as install.sh makes it), and the gateway started by the real service script
(deploy/termux/gateway/run), whose `edgellm` is the emulated Python with the phone's package set
(scripts/arm64_env.py: `[device,client,gateway]`, pure wheels for the gateway). The official
`openai` SDK on this x86 host then gets one chat completion with the key, and 401 without it.

By itself: `python -m pytest tests/arm -k gateway` (tests/arm/conftest.py:pytest_configure).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from edgellm.common.tokens import new_token, write_secret
from scripts.arm64_env import ArmEnv
from tests.arm.conftest import START_TIMEOUT_S, EmulatedDaemon, start_daemon

pytestmark = [pytest.mark.arm, pytest.mark.timeout(1800)]

TERMUX = Path(__file__).resolve().parents[2] / "src" / "edgellm" / "deploy" / "termux"
GATEWAY_RUN = TERMUX / "gateway" / "run"
# What the phone's environment must not leak into the emulated one: these would move the token,
# key or trust away from the Termux home the scripts use.
HOST_ONLY_ENV = (
    "EDGELLM_HOME",
    "EDGELLM_CONFIG_DIR",
    "EDGELLM_TOKEN",
    "EDGELLM_TLS_PIN",
    "EDGELLM_TLS_CA",
    "EDGELLM_TARGET",
    "EDGELLM_INSECURE_LOOPBACK",
    "EDGELLM_GATEWAY_API_KEY",
    "XDG_CONFIG_HOME",
)


@dataclass
class EmulatedGateway:
    """The gateway service's process (its run script exec'd into the emulated `edgellm gateway`)."""

    process: subprocess.Popen[bytes]
    log_path: Path
    port: int
    key: str

    @property
    def base_url(self) -> str:
        """The OpenAI base URL on the phone's loopback."""
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> int:
        """SIGTERM (uvicorn's graceful stop), SIGKILL after 60 s; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


def phone_environ(env: ArmEnv, home: Path) -> dict[str, str]:
    """The emulated process's environment with HOME as Termux's home, nothing of this host's config."""
    environ = {k: v for k, v in env.environ().items() if k not in HOST_ONLY_ENV}
    return {**environ, "HOME": str(home)}


def edgellm_shim(env: ArmEnv, bin_dir: Path) -> None:
    """`edgellm` on PATH, as pip puts it there in Termux: here the emulated Python's CLI.

    Why a shell script: an emulated process cannot exec another ARM binary (docs/arm.md), but the
    service script is a host shell, which can exec qemu.
    """
    bin_dir.mkdir(parents=True)
    shim = bin_dir / "edgellm"
    cmd = " ".join(shlex.quote(c) for c in env.command(["-m", "edgellm.cli", "--log-json"]))
    shim.write_text(f'#!/bin/sh\nexec {cmd} "$@"\n')
    shim.chmod(0o755)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_gateway(gateway: EmulatedGateway) -> None:
    """Poll /health (open, no key) until the gateway says a model is loaded."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if gateway.process.poll() is not None:
            log = gateway.log_path.read_text()[-4000:]
            raise AssertionError(f"emulated gateway exited ({gateway.process.returncode}):\n{log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{gateway.port}/health", timeout=10) as reply:
                if json.loads(reply.read()).get("status") == "ok":
                    return
        except (urllib.error.URLError, OSError):
            pass  # not listening yet (imports under emulation take a while), or 503 before the model
        time.sleep(2)
    raise AssertionError(f"emulated gateway not ready:\n{gateway.log_path.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def phone(
    arm_env: ArmEnv, default_artifact: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EmulatedDaemon, EmulatedGateway]]:
    """Daemon (token + TLS) and gateway service on the emulated CPU, laid out as in Termux."""
    work = tmp_path_factory.mktemp("arm-phone")
    home = work / "home"
    home.mkdir(mode=0o700)
    environ = phone_environ(arm_env, home)
    daemon = start_daemon(
        arm_env, default_artifact, home / ".edgellm", work / "daemon.log", secure=True, environ=environ
    )
    key = new_token()  # install.sh --gateway makes it the same way: 32 random bytes, base64url
    write_secret(home / ".config" / "edgellm" / "gateway-key", key)
    edgellm_shim(arm_env, work / "bin")
    service_env = {
        **environ,
        "PATH": f"{work / 'bin'}:{os.environ['PATH']}",
        "EDGELLM_PORT": str(daemon.port),
        "EDGELLM_GATEWAY_PORT": str(free_port()),
    }
    log_path = work / "gateway.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["sh", str(GATEWAY_RUN)], env=service_env, stdout=log, stderr=subprocess.STDOUT
        )
    gateway = EmulatedGateway(process, log_path, int(service_env["EDGELLM_GATEWAY_PORT"]), key)
    try:
        wait_gateway(gateway)
        yield daemon, gateway
    finally:
        gateway_code = gateway.stop()
        daemon_code = daemon.stop()
    log_tail = log_path.read_text()[-3000:]
    # Why -SIGTERM is clean: uvicorn shuts down gracefully on SIGTERM, then raises the captured
    # signal again (Server.capture_signals) so that its exit status says what stopped it.
    finished = "Finished server process" in log_tail
    assert gateway_code in (0, -signal.SIGTERM) and finished, f"gateway stopped uncleanly:\n{log_tail}"
    assert daemon_code == 0, f"daemon did not stop cleanly ({daemon_code}):\n{daemon.log_text()[-3000:]}"


def test_the_phone_gateway_answers_the_openai_sdk_with_its_key_and_401_without(
    phone: tuple[EmulatedDaemon, EmulatedGateway],
) -> None:
    daemon, gateway = phone
    client = openai.OpenAI(base_url=gateway.base_url, api_key=gateway.key, timeout=900, max_retries=0)
    answer = client.chat.completions.create(
        model="",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=12,
    )
    assert "Paris" in (answer.choices[0].message.content or "")
    # The gateway reached the daemon with the daemon's token over TLS: the daemon served a Generate.
    assert len(daemon.events("generate_done")) == 1

    wrong = openai.OpenAI(base_url=gateway.base_url, api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.models.list()
    assert refused.value.status_code == 401
    with pytest.raises(urllib.error.HTTPError) as bare:
        urllib.request.urlopen(f"{gateway.base_url}/models", timeout=30)  # no Authorization at all
    assert bare.value.code == 401
