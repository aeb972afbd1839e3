"""User errors end in a message and an exit status, never a traceback; every client command sends
the token; the port a daemon holds is its own; targets without a port mean 50051."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from edgellm.common.targets import resolve_host_target, resolve_target, with_port
from edgellm.common.tokens import CONFIG_DIR_ENV, HOME_ENV
from edgellm.device.rpc.server import RunningDaemon
from tests.cli.conftest import Result, free_port


def edgellm_process(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`edgellm ARGS` as a separate process, as a user runs it."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("EDGELLM_")}
    # ... but the session's own data and config dirs (tests/conftest.py), never the developer's: with
    # them stripped a child read and wrote ~/.config/edgellm, and a token left there made `push
    # /nonexistent` refuse the connection instead of the path (CI, 2026-12-05)
    base |= {k: os.environ[k] for k in (HOME_ENV, CONFIG_DIR_ENV) if k in os.environ}
    return subprocess.run(
        [sys.executable, "-m", "edgellm.cli", *argv],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["generate", "--max-new-tokens", "-5", "hi"], 2, "must be at least 1, got -5"),
        (["generate", "--temperature", "nan", "hi"], 2, "not a finite number"),
        (["daemon", "--model", "/nonexistent"], 2, "no artifact at /nonexistent"),
        # Off loopback a token always comes with TLS (self-signed by default); no token is refused.
        (["daemon", "--host", "0.0.0.0", "--insecure-loopback"], 2, "is for 127.0.0.1 / ::1 only"),
        (["host", "--host", "0.0.0.0", "--insecure-loopback"], 2, "is for 127.0.0.1 / ::1 only"),
        (["daemon", "--threads", "0"], 2, "must be at least 1"),
        (["push", "/nonexistent"], 2, "manifest.json"),
        (["telemetry", "--from", "/nonexistent.jsonl"], 2, "--plot"),
    ],
)
def test_user_errors_get_a_message_and_an_exit_status_not_a_traceback(
    argv: list[str], code: int, message: str
) -> None:
    r = edgellm_process(*argv)
    assert r.returncode == code and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_second_daemon_on_a_taken_port_exits_with_a_clear_message(
    bare_daemon_factory: Callable[..., RunningDaemon],
) -> None:
    first = bare_daemon_factory()
    r = edgellm_process("daemon", "--port", str(first.port), "--data-dir", os.devnull + "-unused")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"127.0.0.1:{first.port} is already in use" in r.stderr and "--port" in r.stderr


def test_a_daemon_does_not_share_its_port_with_a_reuseport_listener() -> None:
    """gRPC's default SO_REUSEPORT let two servers share a port; ours asks for it off (so_reuseport 0)."""
    import asyncio

    from edgellm.common.server import CannotListen, ServerSecurity, bind_and_start, new_server

    open_ = ServerSecurity(None, insecure_loopback=True)

    async def attempt() -> None:
        other = grpc.aio.server()  # gRPC defaults: SO_REUSEPORT on
        port = other.add_insecure_port("127.0.0.1:0")
        await other.start()
        try:
            with pytest.raises(CannotListen, match="already in use"):
                await bind_and_start(new_server("127.0.0.1", open_), "127.0.0.1", port)
        finally:
            await other.stop(0)

    asyncio.run(attempt())


def test_an_unreachable_daemon_exits_3_and_says_how_to_start_one(edgellm: Callable[..., Result]) -> None:
    port = free_port()
    r = edgellm("status", "--target", f"127.0.0.1:{port}")
    assert r.code == 3 and f"cannot reach the daemon at 127.0.0.1:{port}" in r.err
    assert "edgellm daemon --model default" in r.err and f"adb forward --list` shows tcp:{port}" in r.err
    r = edgellm("jobs", "artifacts", "--target", f"127.0.0.1:{port}")
    assert r.code == 3 and "host service" in r.err and "edgellm host" in r.err


def test_a_target_without_a_port_means_the_default_port(monkeypatch: pytest.MonkeyPatch) -> None:
    assert with_port("localhost") == "localhost:50051"
    assert with_port("phone.lan:6000") == "phone.lan:6000"
    assert with_port("::1") == "[::1]:50051" and with_port("[::1]") == "[::1]:50051"
    assert with_port("[::1]:7") == "[::1]:7" and with_port("unix:/tmp/s") == "unix:/tmp/s"
    monkeypatch.setenv("EDGELLM_TARGET", "10.0.0.2")
    assert resolve_target(None) == "10.0.0.2:50051" and resolve_host_target("gpu-box") == "gpu-box:50052"


def test_every_client_dials_localhost_on_50051_not_443(monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC reads a bare `localhost` as a DNS name with its default port, 443."""
    from edgellm.client.client import DaemonClient
    from edgellm.client.host_client import HostClient

    monkeypatch.delenv("EDGELLM_TARGET", raising=False)
    with DaemonClient("localhost") as daemon, HostClient("localhost") as host:
        assert daemon.target == "localhost:50051" and host.target == "localhost:50052"


@pytest.fixture(scope="module")
def token_daemon(bare_daemon_factory: Callable[..., RunningDaemon]) -> RunningDaemon:
    return bare_daemon_factory(auth_token="s3cret")


@pytest.mark.parametrize(
    "argv",
    [
        ["config", "set", "setpoint_c=41"],
        ["config", "get"],
        ["telemetry", "--json"],
        ["status"],
        ["models"],
    ],
)
def test_every_client_command_sends_the_token(
    token_daemon: RunningDaemon,
    edgellm: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    tmp_path: Path,
) -> None:
    target = ["--target", f"127.0.0.1:{token_daemon.port}"]
    monkeypatch.setenv("EDGELLM_TOKEN", "s3cret")
    r = edgellm(*argv, *target)
    assert r.code == 0, r.err
    monkeypatch.setenv("EDGELLM_TOKEN", "wrong")
    r = edgellm(*argv, *target)
    assert (
        r.code == 1 and "refused the token from $EDGELLM_TOKEN" in r.err and "set $EDGELLM_TOKEN" not in r.err
    )
    assert "overrides the token files" in r.err
    _no_token_anywhere(monkeypatch, tmp_path)
    r = edgellm(*argv, *target)
    assert r.code == 1 and "requires a token and none was found" in r.err


def _no_token_anywhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No $EDGELLM_TOKEN and empty token directories: the client has nothing to send."""
    monkeypatch.delenv("EDGELLM_TOKEN", raising=False)
    monkeypatch.setenv("EDGELLM_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("EDGELLM_HOME", str(tmp_path / "home"))


def test_generate_and_push_send_the_token_too(
    token_daemon: RunningDaemon,
    edgellm: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    target = ["--target", f"127.0.0.1:{token_daemon.port}"]
    monkeypatch.setenv("EDGELLM_TOKEN", "s3cret")
    r = edgellm("generate", *target, "hi")
    assert r.code == 1 and "model" in r.err and "FAILED_PRECONDITION" not in r.err  # past auth: no model
    _no_token_anywhere(monkeypatch, tmp_path)
    assert "none was found" in edgellm("generate", *target, "hi").err


def test_token_file_tls_pin_and_tls_ca_flags_reach_the_daemon(
    bare_daemon_factory: Callable[..., RunningDaemon],
    edgellm: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """docs/security.md promises --token-file, --tls-pin and --tls-ca on every client command."""
    from edgellm.common.tls import fingerprint

    running = bare_daemon_factory(auth_token="s3cret", tls_self_signed=True)
    cert = running.core.config.store.data_dir / "tls" / "cert.pem"
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    monkeypatch.setenv("EDGELLM_TOKEN", "wrong")  # --token-file wins over the environment
    target = ["--target", f"127.0.0.1:{running.port}", "--token-file", str(token)]
    pin = fingerprint(cert.read_text())
    for verb in (["status"], ["models"], ["config", "get"]):
        assert edgellm(*verb, *target, "--tls-pin", pin).code == 0, verb
    assert edgellm("status", *target, "--tls-ca", str(cert)).code == 0
    assert edgellm("status", *target, "--tls-pin", "sha256:" + "0" * 64).code != 0
    assert edgellm("status", *target).code == 0  # no TLS flag: the certificate the client trusts already
    monkeypatch.setenv("EDGELLM_CONFIG_DIR", str(tmp_path / "empty-config"))  # ... and now none
    monkeypatch.setenv("EDGELLM_HOME", str(tmp_path / "empty-home"))
    r = edgellm("status", *target)
    assert r.code != 0 and "no certificate is known" in r.err  # the token stayed home
