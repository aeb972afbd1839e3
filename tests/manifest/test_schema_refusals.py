"""Over real gRPC: the daemon refuses artifacts of a schema it does not read, naming the field and version."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from edgellm.common.errors import FailedPrecondition
from edgellm.common.manifest import SCHEMA_VERSION
from edgellm.common.push_wire import encode_manifest
from edgellm.common.pusher import PUSH_METHOD
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.manifests import manifest_doc

SUPPORTED = f"schema_version {SCHEMA_VERSION}"


def _old_copy(default_artifact: Path, dst: Path, schema: object) -> Path:
    """The default artifact's files (linked) under a manifest of another (or no) schema_version."""
    dst.mkdir(parents=True)
    for f in default_artifact.iterdir():
        if f.name != "manifest.json":
            (dst / f.name).symlink_to(f.resolve())
    doc = json.loads((default_artifact / "manifest.json").read_text())
    if schema is None:
        del doc["schema_version"]
    else:
        doc["schema_version"] = schema
    (dst / "manifest.json").write_text(json.dumps(doc))
    return dst


@pytest_asyncio.fixture
async def empty_daemon(tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    """A real daemon on port 0 with no model loaded (LoadModel may name directories)."""
    config = DaemonConfig.of(
        port=0, data_dir=tmp_path / "data", disk_reserve_bytes=0, allow_dir_load=True, insecure_loopback=True
    )
    d = await start_server(config)
    yield d
    await d.stop(0)


async def _code_and_details(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value.code(), err.value.details() or ""


@pytest.mark.parametrize("schema", [None, 1, 99])
async def test_load_model_refuses_an_artifact_of_another_schema_with_failed_precondition(
    empty_daemon: RunningDaemon, default_artifact: Path, tmp_path: Path, schema: object
) -> None:
    old = _old_copy(default_artifact, tmp_path / "old", schema)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{empty_daemon.port}") as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        code, details = await _code_and_details(stub.LoadModel(device_pb2.LoadModelRequest(model=str(old))))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "schema_version" in details and SUPPORTED in details and "rebuild" in details
    assert empty_daemon.core.models.loaded is None


async def test_daemon_model_flag_refuses_an_old_artifact_at_start(
    default_artifact: Path, tmp_path: Path
) -> None:
    """What `edgellm daemon --model DIR` runs: start_server loads config.model first."""
    old = _old_copy(default_artifact, tmp_path / "old", 1)
    with pytest.raises(FailedPrecondition, match=f"schema_version 1 is older than the supported {SUPPORTED}"):
        await start_server(DaemonConfig.of(port=0, data_dir=tmp_path / "data", model=old))


@pytest.mark.parametrize("schema", [None, 4])
async def test_push_refuses_a_manifest_of_another_schema_before_any_byte(
    empty_daemon: RunningDaemon, schema: object
) -> None:
    doc = manifest_doc({"a": b"abc"})
    if schema is None:
        del doc["schema_version"]
    else:
        doc["schema_version"] = schema
    text = json.dumps(doc)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{empty_daemon.port}") as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        req = device_pb2.GetArtifactStatusRequest(manifest_json=text)
        code, details = await _code_and_details(stub.GetArtifactStatus(req))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and SUPPORTED in details

    def push() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{empty_daemon.port}") as sync:
            call: grpc.StreamUnaryMultiCallable[bytes, bytes] = sync.stream_unary(PUSH_METHOD)
            call(iter([encode_manifest(text)]), timeout=30)

    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(push)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "schema_version" in str(err.value.details()) and SUPPORTED in str(err.value.details())
    assert empty_daemon.core.store.installed() == [] and not list(empty_daemon.core.store.blobs.iterdir())


async def test_an_installed_artifact_of_an_old_schema_is_refused_on_load_but_can_be_deleted(
    empty_daemon: RunningDaemon,
) -> None:
    """After an upgrade: the store keeps it (and its blobs) until deleted; loading it says why not."""
    store = empty_daemon.core.store
    raw = json.dumps({"schema_version": 1, "name": "old", "files": []}).encode()
    artifact_id = hashlib.sha256(raw).hexdigest()
    (store.artifacts / artifact_id).mkdir()
    (store.artifacts / artifact_id / "manifest.json").write_bytes(raw)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{empty_daemon.port}") as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        code, details = await _code_and_details(
            stub.LoadModel(device_pb2.LoadModelRequest(model=artifact_id[:12]))
        )
        assert code == grpc.StatusCode.FAILED_PRECONDITION and SUPPORTED in details
        assert not (await stub.ListModels(device_pb2.ListModelsRequest())).models
        await stub.DeleteArtifact(device_pb2.DeleteArtifactRequest(artifact_id=artifact_id))
    assert not (store.artifacts / artifact_id).exists()
