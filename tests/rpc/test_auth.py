"""Authentication and TLS against real daemons (fake engine): findings S2, S5, S17, I2 of the review.

Each test attacks the daemon the way another app on the phone, or a host user, would: plain
channels, no token, a wrong token, an odd Bearer spelling, a token sent in cleartext.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.client.client import DaemonClient
from edgellm.common.auth import TokenAuthInterceptor, check_bind
from edgellm.common.channel import ChannelSecurity, open_aio_channel, open_channel
from edgellm.common.errors import FailedPrecondition, InvalidArgument, Unauthenticated
from edgellm.common.tls import ClientTls, fingerprint
from edgellm.common.tokens import CONFIG_DIR_ENV, HOME_ENV, TOKEN_ENV
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.v1 import device_pb2
from tests.fakes.fake_engine import FakeEngine
from tests.rpc.conftest import StartFake

SERVICE = device_pb2.DESCRIPTOR.services_by_name["DeviceDaemon"]


async def _call_raw(
    channel: Any,  # raw-bytes calls: the typed stubs' request types do not apply
    method: str,
    client_streaming: bool,
    server_streaming: bool,
    body: list[bytes] | None = None,
) -> None:
    """Call METHOD with raw request bytes (empty by default: nothing needs to decode on our side)."""
    path = method if method.startswith("/") else f"/edgellm.v1.DeviceDaemon/{method}"
    msgs = body or [b""]
    if client_streaming and server_streaming:
        async for _ in channel.stream_stream(path)(iter(msgs), timeout=10):
            pass
    elif client_streaming:
        await channel.stream_unary(path)(iter(msgs), timeout=10)
    elif server_streaming:
        async for _ in channel.unary_stream(path)(msgs[0], timeout=10):
            pass
    else:
        await channel.unary_unary(path)(msgs[0], timeout=10)


def _status(target: str, **client: object) -> str:
    """GetStatus through the blocking client (run it in a thread: the server shares this loop)."""
    with DaemonClient(target, **client) as c:  # type: ignore[arg-type]
        return c.status().version


async def _authed(start_fake: StartFake, **config: object) -> RunningDaemon:
    return await start_fake(insecure_loopback=False, **config)


def _tls_only(running: RunningDaemon, **options: Any) -> grpc.aio.Channel:
    """A channel that trusts exactly RUNNING's certificate and sends no token."""
    opts = list(options.items())
    return open_aio_channel(
        f"127.0.0.1:{running.port}", ChannelSecurity(None, tls=running.client_tls()), opts
    )


async def test_every_rpc_but_health_answers_unauthenticated_without_the_token(start_fake: StartFake) -> None:
    """S2: on loopback too, every DeviceDaemon RPC (and reflection) needs the token; health does not."""
    running = await _authed(start_fake)
    assert running.token
    async with _tls_only(running) as channel:
        for m in SERVICE.methods:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _call_raw(channel, m.name, m.client_streaming, m.server_streaming)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, m.name
            details = err.value.details() or ""
            # L9: the answer anyone gets says where to read about the token, not where files live.
            assert "edgellm token --help" in details and "~/" not in details and "/token" not in details
        reflect = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _call_raw(channel, reflect, True, True)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()


async def test_a_wrong_token_is_refused_and_the_bearer_scheme_is_case_insensitive(
    start_fake: StartFake,
) -> None:
    """I2: RFC 6750 schemes are case-insensitive; the token itself must match exactly."""
    running = await _authed(start_fake)
    token = running.token
    assert token
    async with _tls_only(running) as channel:
        status = channel.unary_unary(
            "/edgellm.v1.DeviceDaemon/GetStatus",
            request_serializer=device_pb2.GetStatusRequest.SerializeToString,
            response_deserializer=device_pb2.DaemonStatus.FromString,
        )
        for header in (f"Bearer {token}x", f"Bearer {token[:-1]}", token, f"Basic {token}", "Bearer "):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await status(device_pb2.GetStatusRequest(), metadata=(("authorization", header),))
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, header
        for scheme in ("Bearer", "bearer", "BEARER"):
            st = await status(
                device_pb2.GetStatusRequest(), metadata=(("authorization", f"{scheme} {token}"),)
            )
            assert st.version


async def test_an_unauthenticated_push_is_never_decoded(start_fake: StartFake) -> None:
    """S7 without the token: 8 MiB of 2-byte unknown fields is refused without being parsed."""
    running = await _authed(start_fake)
    bomb = b"\x78\x00" * (4 << 20)  # field 15, varint 0, four million times
    async with _tls_only(running, **{"grpc.max_send_message_length": 16 << 20}) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _call_raw(channel, "PushArtifact", True, False, [bomb])
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # Why not a time bound: "never decoded" is a property of the deny handler, checked directly.
    decoded: list[bytes] = []

    async def continuation(details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any]:
        return grpc.stream_unary_rpc_method_handler(lambda it, ctx: None, request_deserializer=decoded.append)

    details = SimpleNamespace(method="/edgellm.v1.DeviceDaemon/PushArtifact", invocation_metadata=())
    handler = await TokenAuthInterceptor("t").intercept_service(continuation, details)
    assert handler is not None and handler.request_deserializer is None


async def test_first_start_makes_a_0600_token_file_and_later_starts_reuse_it(
    fake_artifact: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    config = DaemonConfig.of(port=0, model=fake_artifact, data_dir=data, warmup=False)
    first = await start_server(config, FakeEngine.factory())
    await first.stop(0)
    token_file = data / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert first.token == token and len(token) >= 43  # 256 bits, URL-safe
    second = await start_server(config, FakeEngine.factory())
    await second.stop(0)
    assert second.token == token


async def test_auth_token_file_is_read_and_a_readable_one_is_refused(
    fake_artifact: Path, tmp_path: Path
) -> None:
    """S17: the token comes from a file, not argv; a file other users can read is refused like ssh does."""
    secret = tmp_path / "tok"
    secret.write_text("from-a-file\n")
    secret.chmod(0o644)
    config = DaemonConfig.of(port=0, model=fake_artifact, data_dir=tmp_path / "d", auth_token_file=secret)
    with pytest.raises(FailedPrecondition, match="chmod 600"):
        await start_server(config, FakeEngine.factory())
    secret.chmod(0o600)
    running = await start_server(config, FakeEngine.factory())
    try:
        assert running.token == "from-a-file"
        security = ChannelSecurity("from-a-file", tls=running.client_tls())
        assert await asyncio.to_thread(_status, f"127.0.0.1:{running.port}", security=security)
    finally:
        await running.stop(0)


async def test_a_client_on_the_same_machine_finds_the_token_without_flags(
    fake_artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's daemon (default data dir) and the user's client: no flags, no environment."""
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    running = await start_server(DaemonConfig.of(port=0, model=fake_artifact), FakeEngine.factory())
    try:
        target = f"127.0.0.1:{running.port}"
        assert ChannelSecurity.find().token == running.token
        assert await asyncio.to_thread(_status, target)
        monkeypatch.setenv(TOKEN_ENV, "stale")  # $EDGELLM_TOKEN comes first, as documented
        with pytest.raises(grpc.RpcError) as err:
            await asyncio.to_thread(_status, target)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await running.stop(0)


async def test_binding_rules(fake_artifact: Path, tmp_path: Path) -> None:
    """A token always comes with TLS (self-signed by default), and never --insecure-loopback off loopback."""
    base = DaemonConfig.of(port=0, model=fake_artifact, data_dir=tmp_path / "d", warmup=False)
    for host in ("0.0.0.0", ""):
        cfg = base.with_settings(host=host, insecure_loopback=True)
        with pytest.raises(InvalidArgument, match=r"127\.0\.0\.1"):
            await start_server(cfg, FakeEngine.factory())
    with pytest.raises(InvalidArgument, match="without TLS"):
        check_bind("0.0.0.0", "t", tls=False, insecure_loopback=False)
    for host in ("0.0.0.0", "127.0.0.1"):
        running = await start_server(base.with_settings(host=host), FakeEngine.factory())
        try:
            assert (
                running.security.tls is not None
                and running.security.tls.cert == base.store.data_dir / "tls" / "cert.pem"
            )
        finally:
            await running.stop(0)


def test_a_client_sends_no_token_before_it_knows_the_server_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """H1: with no certificate known (no pin, no CA, no daemon of this user), the token stays home."""
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "config"))
    for target in ("127.0.0.1:50051", "192.0.2.1:50051"):
        with pytest.raises(FailedPrecondition, match="no certificate is known"):
            open_channel(target, ChannelSecurity("secret"))


async def test_tls_with_a_pinned_self_signed_certificate(fake_artifact: Path, tmp_path: Path) -> None:
    """S5: the daemon makes a self-signed pair; a client pins it, a wrong pin or plaintext fails."""
    data = tmp_path / "d"
    running = await start_server(
        DaemonConfig.of(port=0, model=fake_artifact, data_dir=data, tls_self_signed=True),
        FakeEngine.factory(),
    )
    try:
        target = f"127.0.0.1:{running.port}"
        cert = data / "tls" / "cert.pem"
        assert stat.S_IMODE((data / "tls" / "key.pem").stat().st_mode) == 0o600
        pin = fingerprint(cert.read_text())
        pinned = ChannelSecurity(running.token, tls=ClientTls(pins=(pin,)))
        assert await asyncio.to_thread(_status, target, security=pinned)
        by_ca = ChannelSecurity(running.token, tls=ClientTls(ca=cert))
        async with open_aio_channel(target, by_ca) as ch:
            st = await ch.unary_unary(
                "/edgellm.v1.DeviceDaemon/GetStatus",
                request_serializer=device_pb2.GetStatusRequest.SerializeToString,
                response_deserializer=device_pb2.DaemonStatus.FromString,
            )(device_pb2.GetStatusRequest(), timeout=10)
            assert st.version
        with pytest.raises(Unauthenticated, match=r"expected sha256:0{64}"):
            open_channel(target, ChannelSecurity(running.token, tls=ClientTls(pins=("sha256:" + "0" * 64,))))
        async with grpc.aio.insecure_channel(target) as plain:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _call_raw(plain, "GetStatus", False, False)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # plaintext cannot talk to it at all
    finally:
        await running.stop(0)


@pytest.mark.parametrize("links", ["allowed", "refused"])
def test_a_daemon_and_a_host_service_starting_together_share_one_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: str
) -> None:
    """The README starts both at once: each first start must end with the same token (no race),
    also where the phone refuses hard links (M3: Android's SELinux refuses link(2) in app data)."""
    from concurrent.futures import ThreadPoolExecutor

    from edgellm.common.tokens import ensure_token

    if links == "refused":

        def refuse(*_args: object, **_kwargs: object) -> None:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(os, "link", refuse)
    for i in range(20):
        daemon, host = tmp_path / f"{i}" / "data" / "token", tmp_path / f"{i}" / "config" / "token"
        with ThreadPoolExecutor(2) as pool:
            a = pool.submit(ensure_token, daemon, (host,))
            b = pool.submit(ensure_token, host, (daemon,))
            assert a.result() == b.result()
        assert daemon.read_text() == host.read_text()
