"""M3, L11, L14: token rotation that really rotates, secret files nobody else can read or swap,
and a phone's token kept for its own address.

Real daemons and a real host service on port 0 (fake engine), the real `edgellm token` command.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import grpc
import pytest

from edgellm.cli import main
from edgellm.client.client import DaemonClient
from edgellm.client.host_client import HostClient
from edgellm.common.channel import ChannelSecurity
from edgellm.common.errors import FailedPrecondition
from edgellm.common.tls import generate_self_signed
from edgellm.common.tokens import (
    CONFIG_DIR_ENV,
    HOME_ENV,
    TOKEN_ENV,
    daemon_token_path,
    ensure_token,
    find_client_token,
    gateway_key_path,
    host_token_path,
    read_token_file,
    target_token_path,
    write_secret,
)
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import start_server
from edgellm.gateway.keys import KeyFile, ensure_gateway_key
from edgellm.host.server import HostConfig
from edgellm.host.server import start_server as start_host
from tests.fakes.fake_engine import FakeEngine


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh user: empty data and config dirs, no $EDGELLM_TOKEN."""
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "config"))
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    return tmp_path


def _status(target: str, token: str | None = None) -> str:
    with DaemonClient(target, security=ChannelSecurity.find(token, target=target)) as c:
        return c.status().version


def _host_ok(target: str, token: str | None = None) -> bool:
    with HostClient(target, ChannelSecurity.find(token, target=target)) as c:
        c.artifacts()
    return True


async def test_token_rotate_refuses_the_old_secrets_at_once_and_the_new_ones_work(
    machine: Path, fake_artifact: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """M3: the daemon, the host service and the gateway key, rotated without a restart."""
    daemon = await start_server(DaemonConfig.of(port=0, model=fake_artifact), FakeEngine.factory())
    host = await start_host(HostConfig(port=0))
    ensure_gateway_key(gateway_key_path())  # a gateway's first start
    gateway_key = KeyFile(gateway_key_path())  # what a running gateway checks
    try:
        d_target, h_target = f"127.0.0.1:{daemon.port}", f"127.0.0.1:{host.port}"
        old = read_token_file(daemon_token_path())
        old_key = gateway_key.current()
        assert old == read_token_file(host_token_path())  # one user's two services share one token
        assert await asyncio.to_thread(_status, d_target)
        assert await asyncio.to_thread(_host_ok, h_target)

        assert await asyncio.to_thread(main, ["token", "rotate"]) == 0
        out = capsys.readouterr().out
        assert str(daemon_token_path()) in out and str(gateway_key_path()) in out
        assert old not in out  # secrets are never printed
        new = read_token_file(daemon_token_path())
        assert new != old and new == read_token_file(host_token_path())
        assert gateway_key.current() not in ("", old_key)

        for call, target in ((_status, d_target), (_host_ok, h_target)):
            with pytest.raises(grpc.RpcError) as err:
                await asyncio.to_thread(call, target, old)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert await asyncio.to_thread(call, target)  # the new one, found without flags
    finally:
        await daemon.stop(0)
        await host.stop(0)


async def test_a_token_is_made_and_rotated_where_the_phone_refuses_hard_links(
    machine: Path, fake_artifact: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M3: Android's SELinux refuses link(2) in app data; the first start must still make a token."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "link", refuse)
    daemon = await start_server(DaemonConfig.of(port=0, model=fake_artifact), FakeEngine.factory())
    try:
        token_file = daemon_token_path()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        target = f"127.0.0.1:{daemon.port}"
        assert await asyncio.to_thread(_status, target)
        old = read_token_file(token_file)
        assert await asyncio.to_thread(main, ["token", "rotate", "--daemon"]) == 0
        with pytest.raises(grpc.RpcError) as err:
            await asyncio.to_thread(_status, target, old)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert await asyncio.to_thread(_status, target, read_token_file(token_file))
    finally:
        await daemon.stop(0)


def test_rotate_says_when_there_is_nothing_to_rotate(
    machine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["token", "rotate"]) != 0
    assert "no token or key file exists" in capsys.readouterr().err


def test_secret_files_others_can_read_own_or_swap_are_refused(machine: Path) -> None:
    """L11: mode, owner and a directory others can write, for tokens, keys and TLS keys."""
    secret = machine / "private" / "token"
    write_secret(secret, "s3cret")
    assert read_token_file(secret) == "s3cret"
    secret.chmod(0o640)
    with pytest.raises(FailedPrecondition, match="chmod 600"):
        read_token_file(secret)
    secret.chmod(0o600)
    secret.parent.chmod(0o777)
    with pytest.raises(FailedPrecondition, match="can be written by other users"):
        read_token_file(secret)
    secret.parent.chmod(0o700)
    if os.getuid() == 0:  # only root can hand a file to another user
        os.chown(secret, 4242, 4242)
        with pytest.raises(FailedPrecondition, match="belongs to another user"):
            read_token_file(secret)
        os.chown(secret, 0, 0)
    tls = generate_self_signed(machine / "tls")
    tls.key.chmod(0o644)
    with pytest.raises(FailedPrecondition, match="chmod 600"):
        tls.credentials()


def test_a_deployed_phones_token_is_found_for_its_address_only(machine: Path) -> None:
    """L14: the phone's token (fetched by deploy for its forward) is not the host's or a local daemon's."""
    write_secret(target_token_path("127.0.0.1:50051"), "phone")
    write_secret(host_token_path(), "host")
    write_secret(daemon_token_path(), "local")
    found = find_client_token(target="127.0.0.1:50051")
    assert found is not None and found.token == "phone"
    other = find_client_token(target="127.0.0.1:50052")
    assert other is not None and other.token == "host"
    assert ensure_token(daemon_token_path(), (host_token_path(),)) == "local"


def test_only_the_users_own_daemon_shares_the_host_token(machine: Path) -> None:
    """A daemon in another data dir makes its own token and leaves the user's config alone.

    Before, the first start of such a daemon (a bench's, a test's) created the shared token in
    ``<config>/token`` (the rendezvous), and clients then sent it to the user's real daemon.
    """
    from edgellm.common.tokens import default_data_dir
    from edgellm.device.rpc.server import daemon_security

    # Sorts after the config dir, as /tmp does after /root/.config: the host's file was the rendezvous.
    elsewhere = DaemonConfig.of(data_dir=machine / "zz-bench")
    other = daemon_security(elsewhere).token
    assert other and not host_token_path().exists()
    assert read_token_file(daemon_token_path(elsewhere.store.data_dir)) == other

    own = DaemonConfig()
    assert own.store.data_dir == default_data_dir()
    token = daemon_security(own).token
    assert token != other and read_token_file(host_token_path()) == token  # one token, shared
