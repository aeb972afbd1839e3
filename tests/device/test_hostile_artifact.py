"""A hostile or broken artifact cannot crash the daemon: regression tests for review findings S3, S4
and S6 (../shared/reviews/security.md), against a real daemon with the real MNN engine."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from edgellm.common.errors import FailedPrecondition
from edgellm.device import cli as daemon_cli
from edgellm.device.config import DaemonConfig
from edgellm.device.core.loading import check_forward
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.device.store import ArtifactStore, parse_manifest
from edgellm.engine.mnn_paths import check_mnn_paths
from edgellm.v1 import device_pb2, device_pb2_grpc


def _copy(src: Path, dst: Path, config: dict[str, Any] | None = None) -> Path:
    """A copy of an artifact directory; with `config`, its config.json replaced (manifest updated)."""
    shutil.copytree(src, dst)
    if config is not None:
        raw = json.dumps(config).encode()
        (dst / "config.json").write_bytes(raw)
        doc = json.loads((dst / "manifest.json").read_bytes())
        for f in doc["files"]:
            if f["path"] == "config.json":
                f["size"], f["sha256"] = len(raw), hashlib.sha256(raw).hexdigest()
        (dst / "manifest.json").write_text(json.dumps(doc))
    return dst


def _install(store_root: Path, art: Path) -> str:
    """Install an artifact directory into a store as a push would; return its id."""
    store = ArtifactStore(store_root)
    m = parse_manifest((art / "manifest.json").read_bytes())
    store.begin(m)
    for f in m.files:
        part = store.part(m.artifact_id, f.sha256)
        shutil.copyfile(art / f.path, part)
        store.commit_blob(part, f.sha256)
    return store.install(m).artifact_id


def _call(port: int, method: str, request: Any) -> Any:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return getattr(device_pb2_grpc.DeviceDaemonStub(ch), method)(request)


async def _refused(port: int, model: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(_call, port, "LoadModel", device_pb2.LoadModelRequest(model=model))
    return err.value


async def _start(data_dir: Path, **kw: Any) -> RunningDaemon:
    config = DaemonConfig.of(
        port=0, data_dir=data_dir, threads=1, warmup_tokens=8, insecure_loopback=True, **kw
    )
    return await start_server(config)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"llm_model": "../../../etc/llm.mnn"}, "llm_model"),
        ({"llm_model": "/abs/llm.mnn"}, "llm_model"),
        ({"llm_weight": "not-listed.bin"}, "llm_weight"),
        ({"tokenizer_file": "sub/../../x"}, "tokenizer_file"),
        ({"base_dir": "/"}, "base_dir"),
        ({"mllm": {"visual_model": "../v.mnn"}}, "mllm.visual_model"),
        ({"block_model": ["llm.mnn", "../b.mnn"]}, "block_model"),
        ({"llm_config": "../llm_config.json"}, "llm_config"),
    ],
)
def test_s3_every_mnn_path_key_must_be_a_listed_file(
    tmp_path: Path, config: dict[str, Any], key: str
) -> None:
    base = {"llm_model": "llm.mnn", "llm_weight": "llm.mnn.weight", "tokenizer_file": "tokenizer.mtok"}
    (tmp_path / "config.json").write_text(json.dumps({**base, **config}))
    listed = {"config.json", "llm.mnn", "llm.mnn.weight", "tokenizer.mtok"}
    with pytest.raises(FailedPrecondition, match=key.replace(".", r"\.")):
        check_mnn_paths(tmp_path, listed)


def test_s3_default_names_must_be_listed(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"llm_weight": "w", "tokenizer_file": "t"}))
    with pytest.raises(FailedPrecondition, match="llm_model"):
        check_mnn_paths(tmp_path, {"config.json", "w", "t"})  # MNN would open llm.mnn, unlisted


def test_s3_a_forward_that_gives_nan_fails_the_load() -> None:
    class NanEngine:
        def prefill(self, ids: list[int]) -> np.ndarray:
            return np.array([np.nan, 0.0])

        def reset(self) -> None:
            pass

    with pytest.raises(FailedPrecondition, match="non-finite"):
        check_forward(NanEngine())  # type: ignore[arg-type]


async def test_s3_hostile_config_is_refused_and_the_daemon_keeps_serving(
    default_artifact: Path, tmp_path: Path
) -> None:
    """S3 end to end: LoadModel of an artifact whose config escapes it is FAILED_PRECONDITION
    (it used to load a graph from outside the store and then crash in native code)."""
    real = json.loads((default_artifact / "config.json").read_text())
    evil = _copy(default_artifact, tmp_path / "evil", {**real, "llm_model": "../outside/llm.mnn"})
    evil_id = _install(tmp_path / "data" / "store", evil)
    d = await _start(tmp_path / "data")
    try:
        err = await _refused(d.port, evil_id)
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "llm_model" in str(err.details())
        status = await asyncio.to_thread(_call, d.port, "GetStatus", device_pb2.GetStatusRequest())
        assert status.version
        assert not (tmp_path / "data" / "loaded.json").exists()
        assert not (tmp_path / "data" / "loading.json").exists()
    finally:
        await d.stop(0)


async def test_s4_daemon_model_takes_an_installed_id_prefix_or_name(
    default_artifact: Path, tmp_path: Path
) -> None:
    """S4: `edgellm daemon --model <id>` (what the deployed service passes) loads the installed artifact."""
    data = tmp_path / "data"
    artifact_id = _install(data / "store", default_artifact)
    name = json.loads((default_artifact / "manifest.json").read_text())["name"]
    parser = argparse.ArgumentParser()
    daemon_cli.register(parser.add_subparsers())
    for model in (artifact_id, artifact_id[:10], name):
        ns = parser.parse_args(["daemon", "--model", model, "--data-dir", str(data), "--threads", "1"])
        config = daemon_cli.config_from(ns)  # no longer "no artifact at <id>"
        d = await start_server(config.with_settings(port=0, warmup_tokens=8, insecure_loopback=True))
        try:
            status = await asyncio.to_thread(_call, d.port, "GetStatus", device_pb2.GetStatusRequest())
            assert status.model.artifact_id == artifact_id
        finally:
            await d.stop(0)


async def test_s6_directories_load_only_with_the_flag_and_never_through_links(
    default_artifact: Path, tmp_path: Path
) -> None:
    """S6: LoadModel of a directory is refused without --allow-dir-load; with it, a directory of
    symbolic links (files from anywhere) is refused."""
    farm = tmp_path / "farm"
    farm.mkdir()
    for p in default_artifact.iterdir():
        (farm / p.name).symlink_to(p)
    (farm / "manifest.json").unlink()
    shutil.copyfile(default_artifact / "manifest.json", farm / "manifest.json")
    d = await _start(tmp_path / "data")
    try:
        err = await _refused(d.port, str(default_artifact))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "--allow-dir-load" in str(err.details())
    finally:
        await d.stop(0)
    d = await _start(tmp_path / "data", allow_dir_load=True)
    try:
        err = await _refused(d.port, str(farm))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "symbolic link" in str(err.details())
    finally:
        await d.stop(0)


async def test_a_load_that_crashed_is_not_restored(default_artifact: Path, tmp_path: Path) -> None:
    """S3: a "loading" marker left by a crash makes the next start skip that artifact (no crash
    loop), for a remembered model and for --model alike; LoadModel may still try it."""
    data = tmp_path / "data"
    artifact_id = _install(data / "store", default_artifact)
    path = data / "store" / "artifacts" / artifact_id
    record = json.dumps({"path": str(path), "artifact_id": artifact_id})
    (data / "loaded.json").write_text(record)
    for model in (None, Path(artifact_id)):
        (data / "loading.json").write_text(record)  # as a SIGSEGV inside MNN would leave it
        d = await _start(data, model=model)
        try:
            status = await asyncio.to_thread(_call, d.port, "GetStatus", device_pb2.GetStatusRequest())
            assert not status.HasField("model") or not status.model.artifact_id
            assert not (data / "loading.json").exists()
        finally:
            await d.stop(0)
    d = await _start(data)  # no marker now: the remembered model is restored
    try:
        status = await asyncio.to_thread(_call, d.port, "GetStatus", device_pb2.GetStatusRequest())
        assert status.model.artifact_id == artifact_id
    finally:
        await d.stop(0)
    assert (data / "loaded.json").exists()


def test_s3_a_damaged_graph_is_refused_not_a_segfault(default_artifact: Path, tmp_path: Path) -> None:
    """S3: an artifact whose listed, hash-valid llm.mnn is garbage used to load "OK" and then kill
    the daemon with SIGSEGV (rc -11; warm-up on: inside LoadModel). Now LoadModel answers
    FAILED_PRECONDITION and the same daemon process goes on to load a good model."""
    import signal
    import subprocess
    import sys

    from edgellm.deploy.flow import wait_health
    from tests.deploy.conftest import free_port

    bad = _copy(default_artifact, tmp_path / "bad")
    garbage = os.urandom((bad / "llm.mnn").stat().st_size)
    (bad / "llm.mnn").write_bytes(garbage)
    doc = json.loads((bad / "manifest.json").read_bytes())
    for f in doc["files"]:
        if f["path"] == "llm.mnn":
            f["sha256"] = hashlib.sha256(garbage).hexdigest()
    doc["name"] = "damaged"
    (bad / "manifest.json").write_text(json.dumps(doc))
    data = tmp_path / "data"
    bad_id, good_id = _install(data / "store", bad), _install(data / "store", default_artifact)
    port = free_port()
    argv = [sys.executable, "-m", "edgellm.cli", "daemon", "--port", str(port), "--data-dir", str(data)]
    argv += ["--insecure-loopback"]  # the token is i14-auth's concern; this test is about MNN
    proc = subprocess.Popen([*argv, "--threads", "1", "--warmup-tokens", "8"], stderr=subprocess.DEVNULL)
    try:
        wait_health(f"127.0.0.1:{port}", timeout=60)
        with pytest.raises(grpc.RpcError) as err:
            _call(port, "LoadModel", device_pb2.LoadModelRequest(model=bad_id))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "could not load the model" in str(err.value.details())
        assert proc.poll() is None
        loaded = _call(port, "LoadModel", device_pb2.LoadModelRequest(model=good_id))
        assert loaded.model.artifact_id == good_id
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
