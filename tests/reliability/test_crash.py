"""Crash consistency in `make test`: `kill -9` a real daemon process during a push, a load and a
generation (5 times each, at different points), restart it on the same data dir, and check what
docs/reliability.md claims. bench/bench_crash.py is the long, randomised version (50 runs).

After every restart: nothing corrupt or half-installed is visible (on disk or in ListModels), the
daemon answers health, the interrupted push resumes from the bytes the device kept, LoadModel
verifies the install by hash, and a Generate answers. The kill points are reached by polling
(bytes on disk, the load marker, tokens received), never by a fixed delay, so every kill lands in
the middle of its operation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from bench.bench_crash import corrupt_artifacts
from edgellm.common.pusher import CHUNK_BYTES, Pusher, PushProgress, PushReport
from edgellm.device.store import parse_manifest
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.polling import poll
from tests.reliability.daemon_proc import DaemonProcess

ROUNDS = 5


def staged_bytes(data_dir: Path) -> int:
    """Bytes of unfinished pushes on disk (store/staging/<id>/<sha256>.part)."""
    total = 0
    for part in (data_dir / "store" / "staging").glob("*/*.part"):
        try:
            total += part.stat().st_size
        except FileNotFoundError:
            continue  # completed and moved to blobs/ meanwhile
    return total


class Crash:
    """A daemon process on one data dir with the default artifact pushed, and the checks of a restart."""

    def __init__(self, daemon: DaemonProcess, artifact: Path) -> None:
        self.daemon, self.artifact = daemon, artifact
        self.artifact_id = parse_manifest((artifact / "manifest.json").read_bytes()).artifact_id
        self.store = daemon.data_dir / "store"

    def stub(self) -> device_pb2_grpc.DeviceDaemonStub:
        return device_pb2_grpc.DeviceDaemonStub(self.daemon.channel())

    def kill(self) -> None:
        """SIGKILL (no handler runs, nothing is flushed), then check the store as the process left it."""
        self.daemon.kill9()
        assert corrupt_artifacts(self.store) == []

    def restart(self) -> None:
        """Start on the same data dir and port; ListModels shows only complete installs."""
        self.daemon.start(want_serving=False)
        listed = self.stub().ListModels(device_pb2.ListModelsRequest(), timeout=30)
        installed = {p.name for p in (self.store / "artifacts").glob("*")}
        assert {m.artifact_id for m in listed.models} <= installed

    def push(self, **kwargs: object) -> PushReport:
        return Pusher(self.daemon.channel(), self.artifact, **kwargs).run()  # type: ignore[arg-type]

    def generate_answers(self) -> None:
        """The model is loaded (LoadModel verifies every file's sha256 if it was not) and answers."""
        if self.daemon.health() != "SERVING":
            self.stub().LoadModel(device_pb2.LoadModelRequest(model=self.artifact_id), timeout=120)
        request = device_pb2.GenerateRequest(prompt="Hi", max_new_tokens=4)
        last = list(self.stub().Generate(request, timeout=60))[-1]
        assert last.stats.completion_tokens > 0 and self.daemon.health() == "SERVING"

    def remove_artifact(self) -> None:
        """Unload and delete the artifact, so the next push writes all of its bytes."""
        stub = self.stub()
        stub.UnloadModel(device_pb2.UnloadModelRequest(), timeout=60)  # a loaded artifact is not deleted
        stub.DeleteArtifact(device_pb2.DeleteArtifactRequest(artifact_id=self.artifact_id), timeout=60)


@pytest.fixture(scope="module")
def crash(default_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crash]:
    """A daemon as a user starts it (token on), one thread (no autotune), the model pushed and loaded."""
    daemon = DaemonProcess(tmp_path_factory.mktemp("crash") / "data", ("--threads", "1"))
    daemon.start(want_serving=False)
    try:
        crash = Crash(daemon, default_artifact)
        crash.push(retries=0)
        crash.stub().LoadModel(device_pb2.LoadModelRequest(model=crash.artifact_id), timeout=120)
        yield crash
    finally:
        daemon.stop()


def held_bytes(crash: Crash) -> int:
    """What GetArtifactStatus says the device holds of the artifact."""
    return sum(f.have_bytes for f in Pusher(crash.daemon.channel(), crash.artifact).status().files)


def wait_on_disk(crash: Crash, sent: int) -> None:
    """Until the daemon has written most of SENT bytes (gRPC's buffers hold a few chunks)."""
    poll(lambda: staged_bytes(crash.daemon.data_dir) >= sent - 8 * CHUNK_BYTES, f"{sent} bytes on disk")


def push_until(
    crash: Crash, threshold: int, retries: int
) -> tuple[threading.Thread, threading.Event, list[object]]:
    """Start a push in a thread that pauses once THRESHOLD bytes were handed to gRPC (until released)."""
    reached, release = threading.Event(), threading.Event()
    result: list[object] = []

    def pause(p: PushProgress) -> None:
        if p.bytes_sent >= threshold and not reached.is_set():
            reached.set()
            release.wait(120)

    def run() -> None:
        try:
            result.append(crash.push(on_progress=pause, retries=retries))
        except grpc.RpcError as err:
            result.append(err)
        finally:
            reached.set()  # a push that ended before the threshold must not leave the test waiting

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    reached.wait(120)
    return thread, release, result


def test_kill9_during_a_push_leaves_nothing_corrupt_and_the_push_resumes_from_the_kept_bytes(
    crash: Crash,
) -> None:
    total = Pusher(crash.daemon.channel(), crash.artifact).total
    for k in range(1, ROUNDS + 1):
        crash.remove_artifact()
        threshold = total * k // (ROUNDS + 2)  # from 1/7 to 5/7 of the artifact
        thread, release, result = push_until(crash, threshold, retries=0)
        wait_on_disk(crash, threshold)
        on_disk = staged_bytes(crash.daemon.data_dir)
        crash.kill()
        crash.restart()
        release.set()
        thread.join(60)
        assert result and isinstance(result[0], grpc.RpcError), f"round {k}: the push was not cut: {result}"
        held = held_bytes(crash)
        assert held >= on_disk - CHUNK_BYTES, f"round {k}: kept {held} of the {on_disk} bytes on disk"
        report = crash.push(retries=0)
        assert report.bytes_skipped == held and report.bytes_sent == total - held
        crash.generate_answers()


def test_kill9_during_a_load_leaves_the_store_intact_and_an_explicit_load_then_works(crash: Crash) -> None:
    marker = crash.daemon.data_dir / "loading.json"
    for k in range(ROUNDS):
        stub = crash.stub()
        stub.UnloadModel(device_pb2.UnloadModelRequest(), timeout=60)
        load = stub.LoadModel.future(device_pb2.LoadModelRequest(model=crash.artifact_id), timeout=120)
        poll(marker.is_file, "the load marker")
        # The kill point, not a synchronization: at once, then 0.1-0.4 s into the load (it takes
        # seconds). The marker, which the load removes when it ends, proves the kill was mid-load.
        time.sleep(0.1 * k)
        crash.kill()
        assert marker.is_file(), f"round {k}: the load finished before the kill"
        with pytest.raises(grpc.RpcError):
            load.result()
        crash.restart()
        # By design a load that was killed is not retried at start (it may be what crashed).
        assert crash.daemon.health() == "NOT_SERVING"
        crash.generate_answers()


def test_kill9_during_generate_brings_the_model_back_by_itself(crash: Crash) -> None:
    crash.generate_answers()
    for k in range(ROUNDS):
        request = device_pb2.GenerateRequest(prompt="1, 2, 3, 4, 5,", max_new_tokens=300)
        call = crash.stub().Generate(request, timeout=120)
        got = [r for _, r in zip(range(1 + 3 * k), call, strict=False)]
        assert got, f"round {k}: no token before the kill"
        crash.kill()
        call.cancel()
        crash.restart()
        # loaded.json says which model was loaded: the restart loads it again without being asked.
        assert crash.daemon.wait_health(want_serving=True, timeout=120) == "SERVING"
        crash.generate_answers()


def test_a_push_with_retries_survives_its_daemon_being_killed_and_restarted(crash: Crash) -> None:
    """The client's retry loop: the stream drops (SIGKILL), the daemon comes back on the same port,
    and the same Pusher resumes from what the restarted daemon kept and installs the artifact."""
    crash.remove_artifact()
    total = Pusher(crash.daemon.channel(), crash.artifact).total
    thread, release, result = push_until(crash, total // 2, retries=2)
    wait_on_disk(crash, total // 2)
    crash.kill()
    release.set()  # the push fails now and retries while the daemon is down, then it comes back
    crash.restart()
    thread.join(120)
    assert result and isinstance(result[0], PushReport), result
    report = result[0]
    assert report.attempts == 2 and report.response is not None
    assert total <= report.bytes_sent <= total + 16 * CHUNK_BYTES  # resumed, did not start over
    crash.generate_answers()
