"""PushArtifact over real loopback gRPC: resume, corruption, lies, traversal, disk full, concurrency."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from edgellm.common.pusher import Pusher, PushProgress, load_local
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.engine.artifact import open_artifact
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.manifests import manifest_doc, manifest_for


def make_artifact(root: Path, sizes: dict[str, int], name: str = "fake", seed: int = 0) -> Path:
    """Write files of the given sizes (random bytes) and a manifest listing them; return the dir."""
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for i, (rel, size) in enumerate(sizes.items()):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        data = _bytes(size, seed * 1000 + i)
        p.write_bytes(data)
        files.append({"path": rel, "size": size, "sha256": hashlib.sha256(data).hexdigest()})
    (root / "manifest.json").write_text(manifest_for(files, name).to_json())
    return root


def write_manifest(root: Path, files: list[dict[str, Any]]) -> str:
    """Write a schema-valid manifest listing ``files`` (which may lie); return its text."""
    doc = manifest_doc(files)
    root.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc)
    (root / "manifest.json").write_text(text)
    return text


def _bytes(size: int, seed: int) -> bytes:
    # Why not random.randbytes for big files: os.urandom is much faster; seed keeps small ones distinct.
    return seed.to_bytes(8, "little") + os.urandom(max(size - 8, 0)) if size >= 8 else os.urandom(size)


def tree(root: Path) -> dict[str, int]:
    """Relative path -> size of every file under root (to compare store states)."""
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


MIB = 1 << 20
# Why 24 MiB: a cut at 60% must land after the few MiB gRPC buffers in flight.
SIZES = {
    "weights.bin": 16 * MIB + 123,
    "sub/extra.bin": 3 * MIB,
    "config.json": 10,
    "tokens.bin": 100,
    "e": 0,
}


class Cut(Exception):
    """Raised from a progress callback: the client dies mid-push."""


async def _start(data_dir: Path, **kw: Any) -> RunningDaemon:
    return await start_server(
        DaemonConfig.of(port=0, data_dir=data_dir, disk_reserve_bytes=0, **kw, insecure_loopback=True)
    )


@pytest_asyncio.fixture
async def dev(tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    d = await _start(tmp_path / "data")
    yield d
    await d.stop(0)


def _stub(port: int) -> tuple[grpc.Channel, device_pb2_grpc.DeviceDaemonStub]:
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    return ch, device_pb2_grpc.DeviceDaemonStub(ch)


def _push(port: int, art: Path, **kw: Any) -> Any:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return Pusher(ch, art, **kw).run()


def _call(port: int, fn: Callable[[device_pb2_grpc.DeviceDaemonStub], Any]) -> Any:
    ch, stub = _stub(port)
    with ch:
        return fn(stub)


async def _acall(port: int, fn: Callable[[device_pb2_grpc.DeviceDaemonStub], Any]) -> Any:
    # Why a thread: a blocking call on the event loop would starve the in-process server.
    return await asyncio.to_thread(_call, port, fn)


async def _models(port: int) -> list[str]:
    resp = await _acall(port, lambda s: s.ListModels(device_pb2.ListModelsRequest()))
    return [m.artifact_id for m in resp.models]


async def _code(fn: Callable[[], Any]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(fn)
    code: grpc.StatusCode = err.value.code()
    return code


async def _assert_nothing_visible(port: int, artifact_id: str) -> None:
    assert artifact_id not in await _models(port)
    req = device_pb2.LoadModelRequest(model=artifact_id)
    code = await _code(lambda: _call(port, lambda s: s.LoadModel(req)))
    assert code == grpc.StatusCode.NOT_FOUND


def _cut_at(fraction: float) -> Callable[[PushProgress], None]:
    def cb(p: PushProgress) -> None:
        if p.bytes_sent >= fraction * p.bytes_total:
            raise Cut

    return cb


async def test_push_installs_verified_and_second_push_sends_nothing(
    dev: RunningDaemon, tmp_path: Path
) -> None:
    art = make_artifact(tmp_path / "a", SIZES)
    report = await asyncio.to_thread(_push, dev.port, art)
    total = sum(SIZES.values())
    assert report.bytes_sent == total and report.response.bytes_received == total
    installed = open_artifact(dev.core.store.artifacts / report.artifact_id, verify_hashes=True)
    assert installed.artifact_id == report.artifact_id
    assert await _models(dev.port) == [report.artifact_id]
    again = await asyncio.to_thread(_push, dev.port, art)
    assert again.bytes_sent == 0 and again.bytes_skipped == total


async def test_resume_after_client_killed_resends_no_completed_chunk(
    dev: RunningDaemon, tmp_path: Path
) -> None:
    art = make_artifact(tmp_path / "a", SIZES)
    with grpc.insecure_channel(f"127.0.0.1:{dev.port}") as ch:
        first = Pusher(ch, art, on_progress=_cut_at(0.6), retries=0)
        with pytest.raises((Cut, grpc.RpcError)):
            await asyncio.to_thread(first.run)
        await dev.core._pushes.drain()  # the device finishes writing what it accepted
        await _assert_nothing_visible(dev.port, first.manifest.artifact_id)
        status = await asyncio.to_thread(first.status)
        held = sum(f.have_bytes for f in status.files)
        assert 0 < held <= first.sent
        second = Pusher(ch, art)
        report = await asyncio.to_thread(second.run)
    assert second.sent == first.total - held  # nothing the device held is sent twice
    assert first.sent - held <= 8 * MIB  # lost in flight: only what gRPC had buffered
    open_artifact(dev.core.store.artifacts / report.artifact_id, verify_hashes=True)


async def test_resume_after_daemon_restart(tmp_path: Path) -> None:
    art = make_artifact(tmp_path / "a", SIZES)
    d = await _start(tmp_path / "data")
    loop = asyncio.get_running_loop()
    stopping: list[Any] = []

    def stop_daemon(p: PushProgress) -> None:
        if p.bytes_sent >= p.bytes_total // 2 and not stopping:
            stopping.append(asyncio.run_coroutine_threadsafe(d.stop(0), loop))
            # Why wait here: this callback runs on the pushing thread. Without the wait, under
            # load the client sent the rest and the install finished before the stop ran, so the
            # push succeeded and the test failed ("DID NOT RAISE"; flaky under load).
            stopping[0].result(60)

    with pytest.raises(grpc.RpcError):
        await asyncio.to_thread(_push, d.port, art, on_progress=stop_daemon, retries=0)
    await asyncio.wrap_future(stopping[0])
    d2 = await _start(tmp_path / "data")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{d2.port}") as ch:
            p = Pusher(ch, art)
            held = sum(f.have_bytes for f in (await asyncio.to_thread(p.status)).files)
            assert held > 0
            await _assert_nothing_visible(d2.port, p.manifest.artifact_id)
            report = await asyncio.to_thread(p.run)
        assert report.bytes_sent == p.total - held
        open_artifact(d2.core.store.artifacts / report.artifact_id, verify_hashes=True)
    finally:
        await d2.stop(0)


def _raw_push(port: int, manifest_text: str, chunks: list[tuple[str, int, bytes]]) -> Any:
    msgs = [device_pb2.ArtifactChunk(manifest_json=manifest_text)] + [
        device_pb2.ArtifactChunk(chunk=device_pb2.FileChunk(path=p, offset=o, data=d)) for p, o, d in chunks
    ]
    return _call(port, lambda s: s.PushArtifact(iter(msgs)))


async def test_corrupted_chunk_discards_only_that_file(dev: RunningDaemon, tmp_path: Path) -> None:
    art = make_artifact(tmp_path / "a", {"a.bin": 2 * MIB, "b.bin": 1000, "config.json": 5, "tokens.bin": 5})
    text, manifest = load_local(art)
    good = {f.path: (art / f.path).read_bytes() for f in manifest.files}
    bad = bytearray(good["a.bin"][MIB:])
    bad[7] ^= 0xFF
    chunks = [("b.bin", 0, good["b.bin"]), ("a.bin", 0, good["a.bin"][:MIB]), ("a.bin", MIB, bytes(bad))]
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(_raw_push, dev.port, text, chunks)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "a.bin" in str(err.value.details())
    status = await _acall(
        dev.port, lambda s: s.GetArtifactStatus(device_pb2.GetArtifactStatusRequest(manifest_json=text))
    )
    by = {f.path: f for f in status.files}
    assert by["b.bin"].complete and by["a.bin"].have_bytes == 0 and not status.installed
    await _assert_nothing_visible(dev.port, manifest.artifact_id)
    report = await asyncio.to_thread(_push, dev.port, art)
    assert report.bytes_sent == 2 * MIB + 10  # a.bin and the two small files, not b.bin


async def test_lying_manifest_is_refused(dev: RunningDaemon, tmp_path: Path) -> None:
    data = b"x" * 5000
    sha = hashlib.sha256(data).hexdigest()
    short = write_manifest(tmp_path / "s", [{"path": "a", "size": 100, "sha256": sha}])
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(_raw_push, dev.port, short, [("a", 0, data)])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "past" in str(err.value.details())
    wrong = write_manifest(tmp_path / "w", [{"path": "a", "size": 5000, "sha256": "a" * 64}])
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(_raw_push, dev.port, wrong, [("a", 0, data)])
    assert "sha256" in str(err.value.details())
    unlisted = write_manifest(tmp_path / "u", [{"path": "a", "size": 5000, "sha256": sha}])
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(_raw_push, dev.port, unlisted, [("b", 0, data)])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(_raw_push, dev.port, unlisted, [("a", 4096, data[:10])])
    assert "gap" in str(err.value.details())
    assert await _models(dev.port) == []


@pytest.mark.parametrize("name", ["../../etc/passwd", "/abs/path", "a/../../b", "nul\x00name"])
async def test_traversal_names_are_refused_before_any_write(
    dev: RunningDaemon, tmp_path: Path, name: str
) -> None:
    before = tree(dev.core.store.root)
    text = json.dumps({"files": [{"path": name, "size": 1, "sha256": "0" * 64}]})
    code = await _code(lambda: _raw_push(dev.port, text, [(name, 0, b"x")]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    req = device_pb2.GetArtifactStatusRequest(manifest_json=text)
    assert (
        await _code(lambda: _call(dev.port, lambda s: s.GetArtifactStatus(req)))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert tree(dev.core.store.root) == before


async def test_link_names_are_refused(dev: RunningDaemon, tmp_path: Path) -> None:
    link = json.dumps({"files": [{"path": "a", "size": 1, "sha256": "0" * 64, "type": "symlink"}]})
    assert await _code(lambda: _raw_push(dev.port, link, [])) == grpc.StatusCode.INVALID_ARGUMENT
    art = make_artifact(tmp_path / "a", {"a.bin": 10})
    (art / "a.bin").unlink()
    (art / "a.bin").symlink_to("/etc/hostname")
    with pytest.raises(ValueError, match="link"):
        load_local(art)


async def test_quota_refusal_leaves_store_as_it_was(tmp_path: Path) -> None:
    d = await _start(tmp_path / "data", store_quota_bytes=4 * MIB)
    try:
        small = make_artifact(tmp_path / "small", {"a": MIB, "config.json": 2, "tokens.bin": 2}, "small")
        await asyncio.to_thread(_push, d.port, small)
        before = tree(d.core.store.root)
        big = make_artifact(tmp_path / "big", SIZES, "big")
        code = await _code(lambda: _push(d.port, big))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert tree(d.core.store.root) == before
        assert len(await _models(d.port)) == 1
    finally:
        await d.stop(0)


async def test_disk_full_on_a_small_filesystem(tmp_path: Path) -> None:
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)]
    if (await asyncio.to_thread(subprocess.run, mount, check=False)).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root); the quota test covers the refusal path")
    try:
        d = await _start(mnt / "data")
        try:
            before = tree(d.core.store.root)
            art = make_artifact(tmp_path / "a", SIZES)
            assert await _code(lambda: _push(d.port, art)) == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert tree(d.core.store.root) == before and await _models(d.port) == []
        finally:
            await d.stop(0)
    finally:
        await asyncio.to_thread(subprocess.run, ["umount", str(mnt)], check=False)


async def test_concurrent_pushes(tmp_path: Path) -> None:
    # Three at once: above the default cap of 2 (tests/rpc/test_limits.py), which counts a push
    # waiting for another push of the same artifact too.
    dev = await _start(tmp_path / "data", max_pushes=3)
    try:
        await _concurrent_pushes(dev, tmp_path)
    finally:
        await dev.stop(0)


async def _concurrent_pushes(dev: RunningDaemon, tmp_path: Path) -> None:
    a = make_artifact(tmp_path / "a", SIZES, "a", seed=1)
    b = make_artifact(tmp_path / "b", SIZES, "b", seed=2)
    reports = await asyncio.gather(*(asyncio.to_thread(_push, dev.port, x) for x in (a, a, b)))
    same = [r for r in reports if r.artifact_id == reports[0].artifact_id]
    total = sum(SIZES.values())
    # Serialised: the loser sends no chunk until it holds the artifact, and then it has nothing to send.
    assert sum(r.bytes_sent for r in same) == total
    assert sorted(await _models(dev.port)) == sorted({r.artifact_id for r in reports})
    for r in reports:
        open_artifact(dev.core.store.artifacts / r.artifact_id, verify_hashes=True)


async def test_delete_removes_and_unknown_is_not_found(dev: RunningDaemon, tmp_path: Path) -> None:
    art = make_artifact(tmp_path / "a", SIZES)
    report = await asyncio.to_thread(_push, dev.port, art)
    req = device_pb2.DeleteArtifactRequest(artifact_id=report.artifact_id)
    await _acall(dev.port, lambda s: s.DeleteArtifact(req))
    assert await _models(dev.port) == [] and not list(dev.core.store.blobs.iterdir())
    assert await _code(lambda: _call(dev.port, lambda s: s.DeleteArtifact(req))) == grpc.StatusCode.NOT_FOUND


async def test_memory_admission_refuses_a_model_that_does_not_fit(tmp_path: Path) -> None:
    proc = tmp_path / "root" / "proc"
    proc.mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal: 4000000 kB\nMemFree: 10000 kB\nMemAvailable: 200000 kB\n")
    d = await _start(tmp_path / "data", proc_root=tmp_path / "root")
    try:
        art = make_artifact(tmp_path / "a", SIZES)
        report = await asyncio.to_thread(_push, d.port, art)
        req = device_pb2.LoadModelRequest(model=report.artifact_id)
        with pytest.raises(grpc.RpcError) as err:
            await _acall(d.port, lambda s: s.LoadModel(req))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "MiB" in str(err.value.details())
        assert d.core.status().model is None
    finally:
        await d.stop(0)
