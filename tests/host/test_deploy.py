"""Deploy end to end against a real daemon: push, load, generate, device-measured numbers."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import grpc
import pytest

from edgellm.common.channel import ChannelSecurity, open_aio_channel
from edgellm.common.tokens import TOKEN_ENV
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import start_server
from edgellm.host.deploy_job import deploy
from edgellm.host.server import HostConfig
from edgellm.host.server import start_server as start_host
from edgellm.v1 import host_pb2, host_pb2_grpc
from tests.trust import trust_server


async def test_deploy_reports_device_numbers(
    default_artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = await start_server(DaemonConfig.of(port=0, data_dir=tmp_path / "data", disk_reserve_bytes=0))
    monkeypatch.setenv(TOKEN_ENV, d.token or "")  # the deploy finds the daemon's token as a client does
    trust_server(d.security, d.port, "deploy-target")  # ... and trusts its certificate, as after a deploy
    events: list[tuple[float, str]] = []
    try:
        result = await asyncio.to_thread(
            deploy,
            default_artifact,
            f"127.0.0.1:{d.port}",
            lambda f, m: events.append((f, m)),
            max_new_tokens=8,
        )
    finally:
        await d.stop(0)
    assert result.load_ms > 0 and result.warmup_ms > 0
    assert result.ttft_ms > 0 and result.decode_tokens_per_second > 0
    # The default trial prompt goes through the chat template: raw, the instruct model answered it
    # with 0 tokens at 0 tok/s.
    assert result.completion_tokens > 0 and result.sample.strip(), result
    assert result.bytes_sent == result.bytes_total
    fractions = [f for f, _ in events]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(fractions))
    assert fractions[-1] == 1.0
    assert any("MB/s" in m and "ETA" in m for _, m in events)


async def test_deploy_rpc_streams_the_job_and_list_artifacts(
    default_artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "artifacts"
    root.mkdir()
    (root / "smollm2").symlink_to(default_artifact.resolve())
    (root / "broken").mkdir()
    (root / "broken" / "manifest.json").write_text("{not json")
    d = await start_server(DaemonConfig.of(port=0, data_dir=tmp_path / "data", disk_reserve_bytes=0))
    monkeypatch.setenv(TOKEN_ENV, d.token or "")  # what the Deploy job sends to the daemon
    trust_server(d.security, d.port, "deploy-target")  # to the daemon whose certificate it trusts
    target = f"127.0.0.1:{d.port}"
    host = await start_host(HostConfig(port=0, deploy_targets=(target,), artifacts_root=root))
    try:
        async with open_aio_channel(
            f"127.0.0.1:{host.port}", ChannelSecurity(None, tls=host.security.client_tls())
        ) as bare:
            with pytest.raises(grpc.aio.AioRpcError) as err:  # S10: HostService needs its token too
                await host_pb2_grpc.HostServiceStub(bare).ListArtifacts(host_pb2.ListArtifactsRequest())
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        async with open_aio_channel(f"127.0.0.1:{host.port}", ChannelSecurity(host.token)) as channel:
            stub = host_pb2_grpc.HostServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as err:  # S10: Deploy targets come from config
                async for _ in stub.Deploy(
                    host_pb2.DeployRequest(artifact_dir=str(default_artifact), target="127.0.0.1:1")
                ):
                    pass
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "--deploy-target 127.0.0.1:1" in (err.value.details() or "")
            listed = await stub.ListArtifacts(host_pb2.ListArtifactsRequest())
            assert [a.name for a in listed.artifacts] == ["smollm2-135m-instruct"]
            assert len(listed.artifacts[0].artifact_id) == 64
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in stub.Deploy(host_pb2.DeployRequest(artifact_dir=str(tmp_path / "nope"))):
                    pass
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            request = host_pb2.DeployRequest(artifact_dir=str(default_artifact), target=target)
            events = [e async for e in stub.Deploy(request)]
    finally:
        await host.stop(0)
        await d.stop(0)
    assert events[-1].done and not events[-1].error
    result = json.loads(events[-1].result_json)  # the deprecated JSON, kept for older clients
    assert result["ttft_ms"] > 0 and result["load_ms"] > 0
    typed = events[-1].deploy
    assert typed.ttft_ms == result["ttft_ms"] and typed.load_ms == result["load_ms"]
    assert (
        typed.artifact_id == result["artifact_id"] and typed.completion_tokens == result["completion_tokens"]
    )
    assert any("MB/s" in e.progress.message for e in events)
