"""Only what the device needs leaves the host: a built manifest names no host path; the host keeps
them in the artifact's hidden sidecar (host/builder/host_source.py), which a push never sends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc

from edgellm.common.artifact_files import read_manifest
from edgellm.common.pusher import Pusher
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import start_server
from edgellm.host.builder.host_source import HOST_SOURCE, host_hf_dir
from edgellm.host.evaluate.artifact import reference_dir
from tests.fakes.fake_engine import FakeEngine


def absolute_paths(doc: Any) -> list[str]:
    """Every string in a JSON document that is an absolute path."""
    if isinstance(doc, dict):
        return [p for v in doc.values() for p in absolute_paths(v)]
    if isinstance(doc, list):
        return [p for v in doc for p in absolute_paths(v)]
    return [doc] if isinstance(doc, str) and doc.startswith("/") else []


def test_a_built_manifest_names_no_host_path_and_the_sidecar_keeps_them(
    tiny_artifact: tuple[Path, dict[str, Any]],
) -> None:
    path, _ = tiny_artifact
    manifest, raw = read_manifest(path)
    assert absolute_paths(json.loads(raw)) == []
    assert HOST_SOURCE not in {f.path for f in manifest.files}  # never listed, so never pushed
    hf_dir = host_hf_dir(path, manifest)
    assert hf_dir.is_absolute() and hf_dir.name == manifest.source.hf_dir
    assert reference_dir(path) == (hf_dir, "")  # `edgellm eval` still finds its fp reference


async def test_the_manifest_a_daemon_stores_after_a_push_has_no_absolute_host_path(
    tiny_artifact: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, _ = tiny_artifact
    config = DaemonConfig.of(
        port=0, data_dir=tmp_path / "device", disk_reserve_bytes=0, insecure_loopback=True
    )
    running = await start_server(config, FakeEngine.factory())
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            report = await asyncio.to_thread(Pusher(channel, path).run)
        stored = running.core.store.artifacts / report.artifact_id
        assert absolute_paths(json.loads((stored / "manifest.json").read_text())) == []
        assert not (stored / HOST_SOURCE).exists()
    finally:
        await running.stop(0)
