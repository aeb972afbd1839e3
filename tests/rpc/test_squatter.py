"""H1: a program squatting on the daemon's port while the daemon is down gets no token.

The squatter is a bare grpc server on a real loopback port that records every call's metadata:
once in plaintext (what any app can bind) and once with TLS and a certificate of its own. The
user's machine has a token and the certificate of the user's own daemon, as after a first start
or `edgellm deploy device`. The CLI, the deploy's health wait and push, and the gateway's
connection must each refuse to talk and say which server they expected.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio

from edgellm.cli import main
from edgellm.client.aio import connect
from edgellm.common.channel import ChannelSecurity
from edgellm.common.pins import known_certs, trust_of
from edgellm.common.tls import ServerTls, fingerprint, generate_self_signed
from edgellm.common.tokens import CONFIG_DIR_ENV, HOME_ENV, TOKEN_ENV, write_secret
from edgellm.deploy.adb import DeployError
from edgellm.deploy.device import default_artifact_installer
from edgellm.deploy.flow import wait_health
from edgellm.gateway.config import GatewayConfig
from edgellm.gateway.server import start_gateway


@dataclass
class Squatter:
    """A bare grpc server on a loopback port; `seen` holds the metadata of every call it got."""

    server: grpc.aio.Server
    port: int
    seen: list[dict[str, Any]] = field(default_factory=list)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def tokens_seen(self) -> list[Any]:
        return [md["authorization"] for md in self.seen if "authorization" in md]


class _Recorder(grpc.GenericRpcHandler):
    def __init__(self, seen: list[dict[str, Any]]) -> None:
        self.seen = seen

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        self.seen.append(dict(details.invocation_metadata or ()))
        return None  # UNIMPLEMENTED, after the metadata was captured


async def _squat(tls: ServerTls | None) -> Squatter:
    seen: list[dict[str, Any]] = []
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_Recorder(seen),))
    if tls is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", tls.credentials())
    await server.start()
    return Squatter(server, port, seen)


@pytest.fixture
def users_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A token and the user's own daemon's certificate on this machine: (token, its pin)."""
    home, config = tmp_path / "home", tmp_path / "config"
    monkeypatch.setenv(HOME_ENV, str(home))
    monkeypatch.setenv(CONFIG_DIR_ENV, str(config))
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    write_secret(config / "token", "the-users-token")
    tls = generate_self_signed(home / "tls")
    return "the-users-token", fingerprint(tls.cert.read_text())


@pytest_asyncio.fixture(params=["plaintext", "own certificate"])
async def squatter(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Squatter]:
    tls = generate_self_signed(tmp_path / "squatter-tls") if request.param == "own certificate" else None
    running = await _squat(tls)
    yield running
    await running.server.stop(0)


async def test_the_cli_sends_no_token_to_a_squatter_and_says_which_server_it_expected(
    users_machine: tuple[str, str], squatter: Squatter, capsys: pytest.CaptureFixture[str]
) -> None:
    _, pin = users_machine
    code = await asyncio.to_thread(main, ["status", "--target", squatter.target])
    err = capsys.readouterr().err
    assert code != 0
    assert squatter.tokens_seen() == []
    assert pin in err and "token was not sent" in err, err


async def test_deploy_sends_no_token_to_a_squatter_and_says_which_server_it_expected(
    users_machine: tuple[str, str], squatter: Squatter, fake_artifact: Path
) -> None:
    token, pin = users_machine
    phone = trust_of([c for c in known_certs() if c.pin == pin])
    assert phone is not None
    with pytest.raises(DeployError, match=pin):
        await asyncio.to_thread(wait_health, squatter.target, 1.0, False, phone)
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(
            default_artifact_installer,
            squatter.target,
            fake_artifact,
            ChannelSecurity(token, "deploy", phone),
        )
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert squatter.tokens_seen() == []


async def test_the_gateway_sends_no_token_to_a_squatter_and_says_it_is_not_the_daemon(
    users_machine: tuple[str, str], squatter: Squatter
) -> None:
    config = GatewayConfig(port=0, target=squatter.target, api_key="k", telemetry_period_s=0.2)
    gw = await start_gateway(config, connect(squatter.target))
    try:
        async with httpx.AsyncClient(headers={"Authorization": "Bearer k"}, timeout=30) as http:
            reply = await http.post(
                f"{gw.url}/chat/completions",
                json={"model": "", "messages": [{"role": "user", "content": "hi"}]},
            )
        assert reply.status_code == 503
        assert "not the daemon this gateway trusts" in reply.json()["error"]["message"]
        assert squatter.tokens_seen() == []
    finally:
        await gw.stop()
