"""The store cannot be poisoned: regression tests for review findings S1, S9, S12, S13 and S15
(../shared/reviews/security.md), each over real loopback gRPC against a real daemon."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from edgellm.common.pusher import load_local
from edgellm.device.rpc.server import RunningDaemon
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.manifests import manifest_doc
from tests.push.test_push import (
    _acall,
    _call,
    _code,
    _push,
    _raw_push,
    _start,
    make_artifact,
)


@pytest_asyncio.fixture
async def dev(tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    d = await _start(tmp_path / "data")
    yield d
    await d.stop(0)


SMALL = {"config.json": 40, "tokens.bin": 100, "w.bin": 5000}


def _doc_listing(entries: list[dict[str, object]]) -> str:
    """A schema-valid manifest whose files list is replaced after validation (it may be hostile)."""
    doc = manifest_doc({"x": b"x"})
    doc["files"] = entries
    return json.dumps(doc)


async def test_s1_manifest_tmp_name_cannot_overwrite_a_shared_blob(
    dev: RunningDaemon, tmp_path: Path
) -> None:
    """S1: a manifest listing `manifest.json.tmp` with a victim file's sha and size is refused
    before any write, and the victim's blob and installed file keep their bytes."""
    victim = make_artifact(tmp_path / "victim", SMALL, name="victim")
    report = await asyncio.to_thread(_push, dev.port, victim)
    config = (victim / "config.json").read_bytes()
    sha = hashlib.sha256(config).hexdigest()
    for name in ("manifest.json.tmp", "manifest.json.bak", "manifest.jsonx"):
        text = _doc_listing([{"path": name, "size": len(config), "sha256": sha}])
        code = await _code(functools.partial(_raw_push, dev.port, text, []))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert (dev.core.store.blob(sha)).read_bytes() == config
    assert (dev.core.store.artifacts / report.artifact_id / "config.json").read_bytes() == config


async def test_s1_a_changed_blob_is_not_counted_present_and_a_repush_repairs_it(
    dev: RunningDaemon, tmp_path: Path
) -> None:
    """S1: a blob whose size no longer matches is resent by the next push (not 'complete', 0 bytes)."""
    art = make_artifact(tmp_path / "a", SMALL, name="a")
    first = await asyncio.to_thread(_push, dev.port, art)
    blob = dev.core.store.blob(hashlib.sha256((art / "w.bin").read_bytes()).hexdigest())
    blob.unlink()  # the store's links stay; a shorter file takes the blob's name
    blob.write_bytes(b"poison")
    await asyncio.to_thread(dev.core.store.delete, first.artifact_id)
    text, _ = load_local(art)
    status = await _acall(
        dev.port, lambda s: s.GetArtifactStatus(device_pb2.GetArtifactStatusRequest(manifest_json=text))
    )
    assert not {f.path: f for f in status.files}["w.bin"].complete
    again = await asyncio.to_thread(_push, dev.port, art)
    assert again.bytes_sent >= 5000
    installed = dev.core.store.artifacts / again.artifact_id / "w.bin"
    assert installed.read_bytes() == (art / "w.bin").read_bytes()


async def test_s1_load_checks_hashes_of_store_artifacts(dev: RunningDaemon, tmp_path: Path) -> None:
    """S1: an installed file changed in place (same size) fails LoadModel with FAILED_PRECONDITION."""
    art = make_artifact(tmp_path / "a", SMALL, name="a")
    report = await asyncio.to_thread(_push, dev.port, art)
    w = dev.core.store.artifacts / report.artifact_id / "w.bin"
    with w.open("r+b") as f:  # same inode as the blob: both change
        f.write(b"X")
    req = device_pb2.LoadModelRequest(model=report.artifact_id)
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(_call, dev.port, lambda s: s.LoadModel(req))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "sha256" in str(err.value.details())


@pytest.mark.parametrize("artifact_id", ["/etc", "../../x", "ab" * 31, "A" * 64, "0" * 63])
async def test_s12_artifact_status_refuses_anything_but_an_id(dev: RunningDaemon, artifact_id: str) -> None:
    """S12: GetArtifactStatus (and DeleteArtifact) take only 64 lowercase hex digits."""
    req = device_pb2.GetArtifactStatusRequest(artifact_id=artifact_id)
    code = await _code(lambda: _call(dev.port, lambda s: s.GetArtifactStatus(req)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_s12_status_outside_the_store_is_not_read(dev: RunningDaemon, tmp_path: Path) -> None:
    outside = make_artifact(tmp_path / "out", SMALL)
    req = device_pb2.GetArtifactStatusRequest(artifact_id=os.path.relpath(outside, dev.core.store.artifacts))
    code = await _code(lambda: _call(dev.port, lambda s: s.GetArtifactStatus(req)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_s13_a_name_taken_by_another_id_is_refused(dev: RunningDaemon, tmp_path: Path) -> None:
    """S13: a second artifact under an installed one's name is ALREADY_EXISTS; the name still loads one."""
    await asyncio.to_thread(_push, dev.port, make_artifact(tmp_path / "v", SMALL, name="victim", seed=1))
    squat = make_artifact(tmp_path / "s", {"config.json": 1, "tokens.bin": 1}, name="victim", seed=2)
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(_push, dev.port, squat)
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "victim" in str(err.value.details())
    assert [a.name for a in dev.core.store.installed()] == ["victim"]


@pytest.mark.parametrize(
    "name",
    ["x" * 256, "d/" + "é" * 128, "a\x7fb", "a\x85b", "\u202etxt.exe", "caf\u0065\u0301", "a\u200bb"],
)
async def test_s15_bad_names_are_refused(dev: RunningDaemon, tmp_path: Path, name: str) -> None:
    """S15: long components (bytes), DEL and C1 controls, format characters, non-NFC names."""
    text = _doc_listing([{"path": name, "size": 1, "sha256": "0" * 64}])
    code = await _code(lambda: _raw_push(dev.port, text, []))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert list(dev.core.store.staging.iterdir()) == []


async def test_s15_huge_sizes_are_refused(dev: RunningDaemon, tmp_path: Path) -> None:
    text = _doc_listing([{"path": "a", "size": 1 << 70, "sha256": "0" * 64}])
    assert await _code(lambda: _raw_push(dev.port, text, [])) == grpc.StatusCode.INVALID_ARGUMENT


async def test_s9_delete_removes_a_staged_push_and_its_blobs(dev: RunningDaemon, tmp_path: Path) -> None:
    """S9: DeleteArtifact on a push that never finished discards its staging (was NOT_FOUND)."""
    art = make_artifact(tmp_path / "a", SMALL, name="a")
    text, manifest = load_local(art)
    w = (art / "w.bin").read_bytes()
    with pytest.raises(grpc.RpcError):  # cut off: w.bin half sent
        await asyncio.to_thread(_raw_push, dev.port, text, [("w.bin", 0, w[:2000])])
    store = dev.core.store
    assert (store.staging / manifest.artifact_id).is_dir()
    req = device_pb2.DeleteArtifactRequest(artifact_id=manifest.artifact_id)
    await _acall(dev.port, lambda s: s.DeleteArtifact(req))
    assert list(store.staging.iterdir()) == [] and list(store.blobs.iterdir()) == []
    code = await _code(lambda: _call(dev.port, lambda s: s.DeleteArtifact(req)))
    assert code == grpc.StatusCode.NOT_FOUND


async def test_s9_stale_staging_expires_at_start(tmp_path: Path) -> None:
    """S9: staging untouched for over a week is removed when the daemon starts; fresh staging stays."""
    d = await _start(tmp_path / "data")
    try:
        old = make_artifact(tmp_path / "old", SMALL, name="old")
        new = make_artifact(tmp_path / "new", SMALL, name="new", seed=3)
        for art in (old, new):
            text, _ = load_local(art)
            with pytest.raises(grpc.RpcError):
                await asyncio.to_thread(
                    _raw_push, d.port, text, [("w.bin", 0, (art / "w.bin").read_bytes()[:10])]
                )
        staging = d.core.store.staging
    finally:
        await d.stop(0)
    old_id = load_local(old)[1].artifact_id
    week_ago = time.time() - 8 * 24 * 3600
    for p in [staging / old_id, *(staging / old_id).iterdir()]:
        os.utime(p, (week_ago, week_ago))
    d = await _start(tmp_path / "data")
    try:
        assert [p.name for p in staging.iterdir()] == [load_local(new)[1].artifact_id]
    finally:
        await d.stop(0)


async def _refusal(port: int, text: str) -> tuple[grpc.StatusCode, str]:
    """The status code and message a push of manifest TEXT (and no chunks) ends with."""
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(_raw_push, port, text, [])
    return err.value.code(), str(err.value.details())


def _hostile(replace: str, by: str) -> str:
    """A valid manifest's text with one literal fragment swapped (for values json.dumps cannot write)."""
    text = json.dumps(manifest_doc({"x": b"x"}))
    assert replace in text
    return text.replace(replace, by, 1)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # A 401-digit int in a float field: float() raised OverflowError, which was INTERNAL.
        (_hostile('"rope_theta": 100000.0', '"rope_theta": ' + "9" * 401), "too large for a float"),
        # An int over 4,300 digits: json.loads raised a plain ValueError, which was INTERNAL.
        (_hostile('"bits": 4', '"bits": ' + "4" * 5000), "not valid JSON"),
        # Deep nesting: json.loads (or walking the plan) raised RecursionError, which was INTERNAL.
        (_hostile('"plan": {}', '"plan": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000), "nested"),
        (_hostile('"plan": {}', '"plan": ' + '{"a": ' * 100 + "1" + "}" * 100), "nested more than 64"),
    ],
    ids=["401-digit-float", "5000-digit-int", "nested-100000", "nested-100"],
)
async def test_l2_numbers_and_nesting_json_cannot_hold_are_invalid_argument_not_internal(
    dev: RunningDaemon, text: str, says: str
) -> None:
    """L2: each hostile manifest answers INVALID_ARGUMENT saying what is wrong, to a push and to
    GetArtifactStatus, and stages nothing."""
    code, details = await _refusal(dev.port, text)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert says in details
    assert list(dev.core.store.staging.iterdir()) == []
    req = device_pb2.GetArtifactStatusRequest(manifest_json=text)
    with pytest.raises(grpc.RpcError) as err:
        await _acall(dev.port, lambda s: s.GetArtifactStatus(req))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and says in str(err.value.details())


@pytest.mark.parametrize(
    "name", ["evil\x1b[2J\x1b[31mname", "bell\x07", "\u202eexe.txt", "caf\u0065\u0301", "n" * 129]
)
async def test_l5_an_artifact_name_with_controls_or_over_128_characters_is_refused(
    dev: RunningDaemon, name: str
) -> None:
    """L5: the name follows the file names' character rules (no Cc/Cf, NFC) and is at most 128 long."""
    doc = manifest_doc({"x": b"x"})
    doc["name"] = name
    code, details = await _refusal(dev.port, json.dumps(doc))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "artifact name" in details


async def test_l7_two_concurrent_pushes_of_one_name_install_one_and_refuse_the_other(
    dev: RunningDaemon, tmp_path: Path
) -> None:
    """L7: both pushes pass the name check at their start; the check inside install() under the
    store's lock lets the first install and answers the second ALREADY_EXISTS naming the name."""
    pushes = []
    for seed in (1, 2):
        art = make_artifact(tmp_path / f"a{seed}", SMALL, name="twin", seed=seed)
        text, manifest = load_local(art)
        pushes.append((art, text, manifest.artifact_id))
    release = asyncio.Event()

    async def stream(art: Path, text: str) -> AsyncIterator[device_pb2.ArtifactChunk]:
        yield device_pb2.ArtifactChunk(manifest_json=text)
        await release.wait()  # both pushes are past their start before either sends a byte
        for rel in SMALL:
            data = (art / rel).read_bytes()
            yield device_pb2.ArtifactChunk(chunk=device_pb2.FileChunk(path=rel, offset=0, data=data))

    async with grpc.aio.insecure_channel(f"127.0.0.1:{dev.port}") as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        calls = [stub.PushArtifact(stream(art, text), timeout=30) for art, text, _ in pushes]
        ids = {artifact_id for _, _, artifact_id in pushes}
        deadline = time.monotonic() + 30
        while set(dev.core.store.reserved) != ids:  # each has passed the start check and reserved
            assert time.monotonic() < deadline, "the pushes never both started"
            await asyncio.sleep(0.01)
        release.set()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(refused) == 1, outcomes
    assert refused[0].code() == grpc.StatusCode.ALREADY_EXISTS
    assert "'twin' is taken" in (refused[0].details() or "")
    assert [a.name for a in dev.core.store.installed()] == ["twin"]


def _load_model(request: device_pb2.LoadModelRequest, stub: device_pb2_grpc.DeviceDaemonStub) -> Any:
    return stub.LoadModel(request)


async def test_l9_refusals_name_the_artifact_and_its_file_never_the_device_path(tmp_path: Path) -> None:
    """L9: a corrupt store artifact is FAILED_PRECONDITION "artifact <id> is corrupt: w.bin ...", and a
    directory without a manifest NOT_FOUND by its own name; neither message holds the data dir."""
    d = await _start(tmp_path / "data", allow_dir_load=True)
    try:
        art = make_artifact(tmp_path / "a", SMALL, name="a")
        report = await asyncio.to_thread(_push, d.port, art)
        with (d.core.store.artifacts / report.artifact_id / "w.bin").open("r+b") as f:
            f.write(b"X")
        empty = tmp_path / "not-an-artifact"
        empty.mkdir()
        outcomes = []
        for model in (report.artifact_id, str(empty)):
            load = functools.partial(_load_model, device_pb2.LoadModelRequest(model=model))
            with pytest.raises(grpc.RpcError) as err:
                await asyncio.to_thread(_call, d.port, load)
            outcomes.append((err.value.code(), str(err.value.details())))
    finally:
        await d.stop(0)
    (corrupt, corrupt_text), (missing, missing_text) = outcomes
    assert corrupt == grpc.StatusCode.FAILED_PRECONDITION
    assert f"artifact {report.artifact_id[:12]} is corrupt: w.bin" in corrupt_text
    assert missing == grpc.StatusCode.NOT_FOUND
    assert "no artifact 'not-an-artifact'" in missing_text
    assert str(tmp_path) not in corrupt_text + missing_text


async def test_s22_a_pushs_store_checks_and_artifact_status_run_off_the_event_loop(
    dev: RunningDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S22 residuals: has_blob per chunk, the end-of-push stats, the failure path's status and
    GetArtifactStatus's manifest parse ran on the event loop thread (a spy records each call's thread)."""
    import threading

    from edgellm.device.core import daemon as daemon_module
    from edgellm.device.store import parse_manifest

    store = dev.core.store
    loop_thread = threading.get_ident()
    on_loop: list[str] = []

    def spy(name: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            if threading.get_ident() == loop_thread:
                on_loop.append(name)
            return fn(*args)

        return call

    for name in ("has_blob", "status"):
        monkeypatch.setattr(store, name, spy(name, getattr(store, name)))
    monkeypatch.setattr(daemon_module, "parse_manifest", spy("parse_manifest", parse_manifest))
    art = make_artifact(tmp_path / "a", SMALL, name="a")
    text, _ = load_local(art)
    w = (art / "w.bin").read_bytes()
    with pytest.raises(grpc.RpcError):  # ends incomplete: the failure path's status
        await asyncio.to_thread(_raw_push, dev.port, text, [("w.bin", 0, w[:2000])])
    await asyncio.to_thread(_push, dev.port, art)  # resumes: has_blob per chunk, the staged checks
    req = device_pb2.GetArtifactStatusRequest(manifest_json=text)
    status = await _acall(dev.port, lambda s: s.GetArtifactStatus(req))
    assert status.installed
    assert on_loop == []
