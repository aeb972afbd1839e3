"""End to end on real artifacts: a checkpoint's generation_config.json reaches the manifest and the
daemon's GetStatus; the bundled SmolLM2's artifact keeps the client's measured defaults."""

from __future__ import annotations

import json
from pathlib import Path

import grpc

from edgellm.client.sampling import RECOMMENDED, for_model
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import start_server
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.sampling.conftest import TINY
from tests.tiny_families import build_tiny

GENERATION_CONFIG = {"bos_token_id": 1, "eos_token_id": 2, "do_sample": True, "temperature": 0.6,
                     "top_p": 0.9, "top_k": 20, "transformers_version": "5.17.0"}  # fmt: skip


async def test_a_built_checkpoint_records_its_generation_config_and_the_daemon_reports_it(
    tmp_path: Path,
) -> None:
    # RTN 8-bit, no evaluation: the export (~20-40 s on the 2-core box) is what this test needs.
    from edgellm.host.builder.loaded import LoadedModel
    from edgellm.host.builder.pipeline import Measure, build_artifact
    from edgellm.host.convert.pipeline import convert_plan
    from edgellm.host.evaluate.evaluate import EvalConfig

    hf = build_tiny("llama", tmp_path / "hf")
    (hf / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG))
    loaded = LoadedModel.open(str(hf), EvalConfig(tokens=128, context=64, stride=32))
    result = build_artifact(loaded, convert_plan(8, 32, 8), tmp_path / "art", measure=Measure(evaluate=False))
    assert result.manifest.sampling == TINY
    on_disk = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert on_disk["sampling"]["top_k"] == 20 and on_disk["sampling"]["origin"] == "generation_config"
    config = DaemonConfig.of(
        port=0, model=tmp_path / "art", data_dir=tmp_path / "data", warmup=False, insecure_loopback=True
    )
    running = await start_server(config)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = device_pb2_grpc.DeviceDaemonStub(channel)
            status = await stub.GetStatus(device_pb2.GetStatusRequest())
    finally:
        await running.stop(0)
    assert status.model.sampling_defaults.origin == "generation_config"
    assert for_model(status.model).sampling() == {**RECOMMENDED.sampling(), **TINY.values()}


async def test_the_default_artifact_keeps_the_measured_defaults(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub, default_artifact: Path
) -> None:
    status = await daemon_stub.GetStatus(device_pb2.GetStatusRequest())
    manifest = json.loads((default_artifact / "manifest.json").read_text())
    if manifest.get("sampling") is None:  # built before defaults were recorded
        assert not status.model.HasField("sampling_defaults")
    else:  # rebuilt since: it records the measured set as its own
        assert status.model.sampling_defaults.origin == "edgellm"
    assert for_model(status.model) == RECOMMENDED
