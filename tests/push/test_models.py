"""Model management with the real default artifact: push by CLI, load, delete-while-loaded, restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from edgellm.cli import main
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import start_server
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc


async def test_push_load_refuse_delete_restart_reload(default_artifact: Path, tmp_path: Path) -> None:
    cfg = DaemonConfig.of(port=0, data_dir=tmp_path / "data", disk_reserve_bytes=0, insecure_loopback=True)
    d = await start_server(cfg)
    try:
        target = f"127.0.0.1:{d.port}"
        assert (
            await asyncio.to_thread(
                main, ["push", str(default_artifact), "--target", target, "--insecure-loopback"]
            )
            == 0
        )
        [art] = d.core.store.installed()
        async with grpc.aio.insecure_channel(target) as ch:
            stub = device_pb2_grpc.DeviceDaemonStub(ch)
            loaded = await stub.LoadModel(device_pb2.LoadModelRequest(model=art.artifact_id[:12]))
            assert loaded.model.artifact_id == art.artifact_id
            assert loaded.load_ms > 0 and loaded.warmup_ms > 0
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.DeleteArtifact(device_pb2.DeleteArtifactRequest(artifact_id=art.artifact_id))
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            models = (await stub.ListModels(device_pb2.ListModelsRequest())).models
            assert [(m.artifact_id, m.loaded) for m in models] == [(art.artifact_id, True)]
    finally:
        await d.stop(0)
    d2 = await start_server(cfg)  # same data dir: the daemon reloads the model it had
    try:
        model = d2.core.status().model
        assert model is not None and model.artifact.artifact_id == art.artifact_id
        async with grpc.aio.insecure_channel(f"127.0.0.1:{d2.port}") as ch:
            stub = device_pb2_grpc.DeviceDaemonStub(ch)
            await stub.UnloadModel(device_pb2.UnloadModelRequest())
            await stub.DeleteArtifact(device_pb2.DeleteArtifactRequest(artifact_id=art.artifact_id))
            assert not (await stub.ListModels(device_pb2.ListModelsRequest())).models
    finally:
        await d2.stop(0)
    d3 = await start_server(cfg)  # unloaded on purpose: nothing to reload
    try:
        assert d3.core.status().model is None
    finally:
        await d3.stop(0)


async def _old_list_models(
    request: device_pb2.ListModelsRequest, context: object
) -> device_pb2.ListModelsResponse:
    """ListModels of a daemon from before L5's fix: a name with ANSI escapes and a bidi override."""
    info = common_pb2.ArtifactInfo(
        artifact_id="ab" * 32, name="evil\x1b[2J\x1b[31m\u202etxt", quantization="int4\x07"
    )
    return device_pb2.ListModelsResponse(models=[info])


async def test_l5_models_never_writes_control_characters_raw_to_the_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """L5: `edgellm models` escapes the Cc/Cf characters a daemon lists (ESC, BEL, RLO)."""
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(
        _old_list_models,
        request_deserializer=device_pb2.ListModelsRequest.FromString,
        response_serializer=device_pb2.ListModelsResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("edgellm.v1.DeviceDaemon", {"ListModels": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        # A bare plaintext server standing in for a token holder's daemon: the plaintext client flag.
        rc = await asyncio.to_thread(main, ["models", "--target", f"127.0.0.1:{port}", "--insecure-loopback"])
    finally:
        await server.stop(0)
    out = capsys.readouterr().out
    assert rc == 0
    assert "evil\\x1b[2J\\x1b[31m\\u202etxt" in out and "int4\\x07" in out
    assert not any(c in out for c in "\x1b\x07\u202e")
