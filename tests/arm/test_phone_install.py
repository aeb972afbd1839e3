"""The phone's install set, `edgellm[device,client]`, in a fresh venv: no matplotlib, and it serves.

deploy/termux/install.sh installs the wheel with `[client]` on top of pkg's numpy and grpcio and a
source-built MNN (the `device` extra's packages): this test installs exactly that set from the
checkout's wheel into an empty venv on this host, starts `edgellm daemon` from it and talks to it
with that venv's own `edgellm status` and `edgellm generate`. The emulated aarch64 run checks the
same set on ARM (tests/arm/test_arm_daemon.py, `make test-arm`). About 25-40 s, most of it pip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.arm64_env import build_wheel

PHONE_SET = "device,client"  # install.sh: "${WHEEL}[client]" beside pkg's numpy/grpcio and MNN
HOST_ONLY = ("matplotlib", "torch", "transformers", "llmexport")
START_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def phone_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the checkout's wheel with the phone's extras (pip's own resolution)."""
    base = tmp_path_factory.mktemp("phone-venv")
    wheel = build_wheel(base / "wheel")
    venv = base / "venv"
    # The venv's own Python only: PYTHONPATH (the test's, pointing at the checkout) would make pip
    # see edgellm as installed and skip it.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"{wheel}[{PHONE_SET}]"], check=True, env=clean)
    return venv


def isolated_env(home: Path) -> dict[str, str]:
    """The daemon's and the CLI's environment: their own data and config dirs, nothing of the host's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "EDGELLM_"))}
    env.update(EDGELLM_HOME=str(home / "data"), EDGELLM_CONFIG_DIR=str(home / "config"))
    return env


def listening_port(log: Path, process: subprocess.Popen[bytes]) -> int:
    """The port from the daemon's `daemon_listening` log line (polled until it appears)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"daemon_listening"' in line:
                return int(json.loads(line)["port"])
        if process.poll() is not None:
            raise AssertionError(f"daemon exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        time.sleep(0.2)  # polling the log, not a synchronisation sleep
    raise AssertionError(f"daemon not listening after {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def phone_daemon(
    phone_venv: Path, default_artifact: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    """`edgellm daemon` from the phone venv on a free port; yields (target, environment)."""
    home = tmp_path_factory.mktemp("phone-home")
    env = isolated_env(home)
    log = home / "daemon.log"
    args = [
        str(phone_venv / "bin" / "edgellm"),
        "--log-json",
        "daemon",
        "--port",
        "0",
        "--model",
        str(default_artifact),
    ]
    # One thread, no drafting, no governor: this test proves the install, not speed.
    args += ["--threads", "1", "--draft-max", "0", "--governor", "off", "--warmup-tokens", "32"]
    with log.open("wb") as out:
        process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield f"127.0.0.1:{listening_port(log, process)}", env
    finally:
        process.terminate()
        process.wait(60)


def test_the_phone_set_installs_without_matplotlib_or_any_host_package(phone_venv: Path) -> None:
    probe = (
        f"import importlib.util as u, json; print(json.dumps([m for m in {HOST_ONLY!r} if u.find_spec(m)]))"
    )
    env = isolated_env(phone_venv)
    out = subprocess.run(
        [str(phone_venv / "bin" / "python"), "-c", probe], check=True, capture_output=True, text=True, env=env
    )
    assert json.loads(out.stdout) == []


def test_the_daemon_and_the_cli_run_from_the_phone_set(
    phone_venv: Path, phone_daemon: tuple[str, dict[str, str]]
) -> None:
    target, env = phone_daemon
    cli = [str(phone_venv / "bin" / "edgellm")]
    # The model loads after the port opens: poll status until it names the model.
    deadline = time.monotonic() + START_TIMEOUT_S
    status = subprocess.run(
        [*cli, "status", "--target", target, "--json"], env=env, capture_output=True, text=True
    )
    while '"model"' not in status.stdout and time.monotonic() < deadline:
        time.sleep(0.5)  # polling the daemon's own status, not a synchronisation sleep
        status = subprocess.run(
            [*cli, "status", "--target", target, "--json"], env=env, capture_output=True, text=True
        )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["engine_state"] == "ENGINE_STATE_IDLE"
    answer = subprocess.run(
        [
            *cli,
            "generate",
            "--chat",
            "--target",
            target,
            "--max-new-tokens",
            "24",
            "--temperature",
            "0",
            "What is the capital of France?",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )
    assert answer.returncode == 0, answer.stderr
    assert "Paris" in answer.stdout
    plot = subprocess.run(
        [*cli, "telemetry", "--target", target, "--plot", "t.png", "--samples", "1"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert plot.returncode != 0 and "pip install 'edgellm[plot]'" in plot.stderr
