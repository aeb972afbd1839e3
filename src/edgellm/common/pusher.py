"""Resumable artifact push (PushArtifact's sender): ask the device what it has, send what is missing.

In common so the `edgellm push` command, the host's deploy job and `edgellm deploy` share one sender.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from edgellm.common.errors import EdgeError
from edgellm.common.manifest import MANIFEST, FileEntry
from edgellm.common.push_manifest import PUSH_STATUS_KEY, PushManifest, parse_manifest
from edgellm.common.push_wire import encode_chunk, encode_manifest
from edgellm.v1 import device_pb2, device_pb2_grpc

CHUNK_BYTES = 1 << 20
PUSH_METHOD = "/edgellm.v1.DeviceDaemon/PushArtifact"
RETRY_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# Why a retry waits for the daemon: a daemon that crashed is restarted by its service in seconds
# (bench_crash: restart to health median 2.8 s, max 13.6 s); failing at once on the first refused
# connection would spend every retry while it is down.
RETRY_WAIT_S = 60.0


@dataclass(frozen=True)
class PushProgress:
    """Progress of one push, as the progress bar and Deploy's job events show it."""

    bytes_done: int  # bytes the device holds, counting what it had before this push
    bytes_total: int
    bytes_sent: int  # bytes sent by this push so far
    bytes_per_second: float
    eta_seconds: float  # < 0 when unknown


@dataclass(frozen=True)
class PushReport:
    """What a push did, end to end."""

    artifact_id: str
    bytes_total: int
    bytes_sent: int  # over every attempt, including bytes lost to interruptions
    bytes_skipped: int  # already on the device before the push started
    attempts: int
    seconds: float
    response: device_pb2.PushArtifactResponse | None

    @property
    def mb_per_second(self) -> float:
        """Throughput of the bytes actually sent (MB = 10^6 bytes)."""
        return self.bytes_sent / max(self.seconds, 1e-9) / 1e6


ProgressFn = Callable[[PushProgress], None]


def load_local(artifact_dir: Path) -> tuple[str, PushManifest]:
    """Read and check an artifact directory: a safe manifest and regular files of the listed sizes."""
    text = (artifact_dir / MANIFEST).read_text(encoding="utf-8")
    try:
        manifest = parse_manifest(text)
    except EdgeError as err:  # e.g. an artifact built by an older edgellm: say so before connecting
        raise ValueError(f"{artifact_dir}: {err}") from err
    root = artifact_dir.resolve()
    for f in manifest.files:
        p = artifact_dir / f.path
        for parent in (p, *p.parents):
            if parent == artifact_dir:
                break
            if parent.is_symlink():
                raise ValueError(f"{f.path}: {parent} is a link; push only regular files")
        if not p.is_file() or root not in p.resolve().parents:
            raise ValueError(f"{f.path} is missing or not a regular file inside {artifact_dir}")
        if p.stat().st_size != f.size:
            raise ValueError(f"{f.path} is {p.stat().st_size} bytes but the manifest says {f.size}")
    return text, manifest


def plan(manifest: PushManifest, status: device_pb2.ArtifactStatus) -> list[tuple[FileEntry, int]]:
    """(file, resume offset) for each distinct content the device still lacks."""
    have = {f.path: f for f in status.files}
    out: list[tuple[FileEntry, int]] = []
    seen: set[str] = set()
    for f in manifest.files:
        if f.sha256 in seen:
            continue
        seen.add(f.sha256)
        st = have.get(f.path)
        if st is not None and st.complete:
            continue
        offset = st.have_bytes if st is not None else 0
        if offset < f.size or f.size == 0:
            out.append((f, offset))
    return out


class Pusher:
    """Pushes one artifact directory over a channel to a DeviceDaemon, resuming after failures."""

    def __init__(
        self,
        channel: grpc.Channel,
        artifact_dir: Path,
        chunk_bytes: int = CHUNK_BYTES,
        on_progress: ProgressFn | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
        retries: int = 3,
    ) -> None:
        self.stub = device_pb2_grpc.DeviceDaemonStub(channel)
        # Why a hand-made call: requests are pre-encoded by edgellm.common.push_wire (one copy per chunk
        # instead of three); the bytes on the wire are the same ArtifactChunk messages.
        self._push_call: grpc.StreamUnaryMultiCallable[bytes, device_pb2.PushArtifactResponse]
        self._push_call = channel.stream_unary(
            PUSH_METHOD,
            request_serializer=None,
            response_deserializer=device_pb2.PushArtifactResponse.FromString,
        )
        self.dir = artifact_dir
        self.chunk_bytes = chunk_bytes
        self.on_progress = on_progress
        self.metadata = tuple(metadata or ())
        self.retries = retries
        self.text, self.manifest = load_local(artifact_dir)
        self.total = sum(self.manifest.unique_blobs().values())
        self.sent = 0

    def status(self, wait_s: float | None = None) -> device_pb2.ArtifactStatus:
        """The device's view of this artifact; with wait_s, wait that long for an unreachable daemon."""
        request = device_pb2.GetArtifactStatusRequest(manifest_json=self.text)
        if wait_s is None:
            return self.stub.GetArtifactStatus(request, metadata=self.metadata, timeout=30)
        return self.stub.GetArtifactStatus(
            request, metadata=self.metadata, timeout=wait_s, wait_for_ready=True
        )

    def run(self) -> PushReport:
        """Push until installed; retry transient failures (each retry resumes from the device's state)."""
        start = time.perf_counter()
        first = self.status()
        skipped = self.total - _missing(self.manifest, first)
        attempts = 0
        while True:
            status = first if attempts == 0 else self.status(wait_s=RETRY_WAIT_S)
            attempts += 1
            if status.installed:
                return self._report(attempts, start, skipped, None)
            try:
                return self._report(attempts, start, skipped, self._push(status))
            except grpc.RpcError as err:
                retry = err.code() in RETRY_CODES or "sha256 check" in (err.details() or "")
                if not retry or attempts > self.retries:
                    raise
                time.sleep(min(0.2 * 2**attempts, 5.0))

    def _report(
        self, attempts: int, start: float, skipped: int, response: device_pb2.PushArtifactResponse | None
    ) -> PushReport:
        return PushReport(
            artifact_id=self.manifest.artifact_id,
            bytes_total=self.total,
            bytes_sent=self.sent,
            bytes_skipped=skipped,
            attempts=attempts,
            seconds=time.perf_counter() - start,
            response=response,
        )

    def _push(self, status: device_pb2.ArtifactStatus) -> device_pb2.PushArtifactResponse:
        """One PushArtifact call: the manifest, then (once the device says go) the missing chunks."""
        go: queue.SimpleQueue[device_pb2.ArtifactStatus | None] = queue.SimpleQueue()
        call = self._push_call.future(self._messages(go), metadata=self.metadata)
        fresh: device_pb2.ArtifactStatus | None = None
        try:
            # Why wait: the device holds a push of an artifact another push is writing until that
            # one ends; chunks sent meanwhile pile up in gRPC's buffers, only to be skipped.
            fresh = _pushed_status(call.initial_metadata())
        finally:
            go.put(fresh)  # None ends the request stream: the call already failed
        return call.result()

    def _messages(self, go: queue.SimpleQueue[device_pb2.ArtifactStatus | None]) -> Iterator[bytes]:
        yield encode_manifest(self.text)
        status = go.get()
        if status is None:
            return
        todo, done = plan(self.manifest, status), self.total - _missing(self.manifest, status)
        t0 = time.perf_counter()
        sent_here = 0
        for entry, offset in todo:
            if entry.size == 0:
                continue
            with (self.dir / entry.path).open("rb") as f:
                f.seek(offset)
                while offset < entry.size:
                    data = f.read(min(self.chunk_bytes, entry.size - offset))
                    if not data:
                        raise ValueError(f"{entry.path} shrank while being pushed")
                    yield encode_chunk(entry.path, offset, data)
                    offset += len(data)
                    sent_here += len(data)
                    done += len(data)
                    self.sent += len(data)
                    if self.on_progress is not None:
                        self.on_progress(self._progress(done, sent_here, t0))

    def _progress(self, done: int, sent_here: int, t0: float) -> PushProgress:
        rate = sent_here / max(time.perf_counter() - t0, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else -1.0
        return PushProgress(done, self.total, self.sent, rate, eta)


def _pushed_status(metadata: Sequence[tuple[str, str | bytes]] | None) -> device_pb2.ArtifactStatus | None:
    """The status the device sent when it took the push; None when the call failed before that."""
    for key, value in metadata or ():
        if key == PUSH_STATUS_KEY and isinstance(value, bytes):
            return device_pb2.ArtifactStatus.FromString(value)
    return None


def _missing(manifest: PushManifest, status: device_pb2.ArtifactStatus) -> int:
    return sum(f.size - off for f, off in plan(manifest, status))
