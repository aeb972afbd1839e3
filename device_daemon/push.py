"""Receive a pushed artifact: stage chunks, verify each file's sha256, install atomically.

Writes and hashing run on one helper thread per push (both release the GIL), pipelined behind
the network reads, so a push costs little more than the bytes themselves. A staged file's size is
its persisted offset: a push that dies (client killed, link dropped, daemon restarted) resumes
there, and the hash check at the end of each file catches anything a crash tore.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from common.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from common.logs import get_logger
from device_daemon.artifact import Artifact
from device_daemon.store.manifest import FileEntry, PushManifest, parse_manifest
from device_daemon.store.store import ArtifactStore
from edgellm.v1 import device_pb2

log = get_logger(__name__)

MAX_CHUNK_BYTES = 4 << 20
MAX_PENDING_WRITES = 8


@dataclass(frozen=True)
class PushResult:
    """What a finished push did."""

    artifact: Artifact
    bytes_received: int
    bytes_skipped: int


class _Part:
    """One file being written: its handle, running hash and next expected offset."""

    def __init__(self, path: Path, entry: FileEntry) -> None:
        self.path = path
        self.entry = entry
        self.hash = hashlib.sha256()
        self.offset = 0  # bytes accepted from the network (the loop's view)
        self.written = 0  # bytes on disk (the I/O thread's view)
        self.fh: IO[bytes] | None = None

    def open(self) -> None:
        """Open for append, re-hashing what an earlier push left (runs on the I/O thread)."""
        fh = self.path.open("ab+")
        size = fh.seek(0, os.SEEK_END)
        if size > self.entry.size:  # more than the file can hold: stale or torn, start over
            fh.truncate(0)
            size = 0
        fh.seek(0)
        while block := fh.read(1 << 20):
            self.hash.update(block)
        self.fh = fh
        self.written = self.offset = size

    def write(self, data: bytes, offset: int) -> None:
        """Append data at offset and hash it (I/O thread); never leaves a hole."""
        if self.fh is None or offset != self.written:
            raise FailedPrecondition(f"{self.entry.path}: write at {offset}, but {self.written} on disk")
        try:
            self.fh.write(data)
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ResourceExhausted(f"the device's disk filled while writing {self.entry.path}") from err
            raise
        self.hash.update(data)
        self.written += len(data)

    def close(self) -> None:
        """Flush, fsync and close (I/O thread)."""
        if self.fh is not None:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            self.fh = None


class PushReceiver:
    """Runs pushes against a store; pushes of the same artifact are serialised."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self._locks: dict[str, asyncio.Lock] = {}

    async def receive(self, messages: AsyncIterator[device_pb2.ArtifactChunk]) -> PushResult:
        """Consume one push stream (manifest first, then chunks) and install the artifact."""
        first = await anext(messages, None)
        if first is None or first.WhichOneof("payload") != "manifest_json":
            raise InvalidArgument("a push must start with a message carrying manifest_json")
        manifest = parse_manifest(first.manifest_json)
        lock = self._locks.setdefault(manifest.artifact_id, asyncio.Lock())
        async with lock:
            try:
                return await self._receive(manifest, messages)
            finally:
                self.store.release(manifest.artifact_id)

    async def _receive(
        self, manifest: PushManifest, messages: AsyncIterator[device_pb2.ArtifactChunk]
    ) -> PushResult:
        store = self.store
        status = store.status(manifest)
        if status.installed:
            art = store.install(manifest)  # no-op apart from dropping stale staging
            return PushResult(art, 0, manifest.total_bytes)
        store.reserve(manifest, status)
        store.begin(manifest)
        log.info("push_started", artifact_id=manifest.artifact_id[:12], missing=status.missing_bytes)
        io = ThreadPoolExecutor(1, thread_name_prefix="push-io")
        pending: deque[Future[Any]] = deque()
        parts: dict[str, _Part] = {}
        received = skipped = 0
        loop = asyncio.get_running_loop()

        async def run(fn: Callable[..., Any], *args: Any) -> Any:
            # Why shield: cancelling a wrapped future cancels a queued job, and a skipped write
            # would leave a hole that the next push resumes after.
            return await asyncio.shield(asyncio.wrap_future(io.submit(fn, *args), loop=loop))

        async def drain(keep: int) -> None:
            while len(pending) > keep:
                await asyncio.shield(asyncio.wrap_future(pending.popleft(), loop=loop))

        try:
            async for msg in messages:
                if msg.WhichOneof("payload") != "chunk":
                    raise InvalidArgument("only the first message of a push may carry a manifest")
                c = msg.chunk
                entry = manifest.entry(c.path)
                n = len(c.data)
                if n > MAX_CHUNK_BYTES:
                    raise InvalidArgument(f"chunk of {n} bytes for {c.path}; at most {MAX_CHUNK_BYTES}")
                if c.offset + n > entry.size:
                    raise InvalidArgument(
                        f"chunk {c.path}@{c.offset}+{n} runs past the manifest's size {entry.size}"
                    )
                if store.blob(entry.sha256).is_file():
                    skipped += n
                    continue
                part = parts.get(entry.sha256)
                if part is None:
                    part = parts[entry.sha256] = _Part(store.part(manifest.artifact_id, entry.sha256), entry)
                    await run(part.open)
                if c.offset > part.offset:
                    raise InvalidArgument(
                        f"chunk {c.path}@{c.offset} leaves a gap: the device has {part.offset} bytes "
                        "(ask GetArtifactStatus where to resume)"
                    )
                data = c.data[part.offset - c.offset :] if c.offset < part.offset else c.data
                skipped += n - len(data)
                if not data:
                    continue
                received += len(data)
                pending.append(io.submit(part.write, data, part.offset))
                part.offset += len(data)
                if part.offset == entry.size:
                    await drain(0)
                    await run(self._finish, part)
                    del parts[entry.sha256]
                else:
                    await drain(MAX_PENDING_WRITES)
            await drain(0)
            for part in list(parts.values()):  # zero-length files and parts already full
                if part.offset == part.entry.size:
                    await run(self._finish, part)
                    del parts[part.entry.sha256]
            for f in manifest.files:  # empty files, and parts filled by a push cut off before its check
                st = store.part(manifest.artifact_id, f.sha256)
                full = f.size == 0 or (st.is_file() and st.stat().st_size == f.size)
                if full and not store.blob(f.sha256).is_file():
                    p = _Part(store.part(manifest.artifact_id, f.sha256), f)
                    await run(p.open)
                    await run(self._finish, p)
            missing = [f for f in manifest.files if not store.blob(f.sha256).is_file()]
            if missing:
                gap = sum(st.size - st.have_bytes for st in store.status(manifest).files if not st.complete)
                raise FailedPrecondition(
                    f"push ended with {len(missing)} of {len(manifest.files)} files incomplete "
                    f"({gap} bytes missing, e.g. {missing[0].path}); push again to resume"
                )
            art = await loop.run_in_executor(io, store.install, manifest)
            log.info("push_installed", artifact_id=manifest.artifact_id[:12], received=received)
            return PushResult(art, received, skipped)
        finally:
            # Why wait here even when cancelled: the next push of this artifact must see every
            # byte this one accepted on disk, or it would resume from a wrong offset.
            for part in parts.values():
                pending.append(io.submit(part.close))
            io.shutdown(wait=True)

    def _finish(self, part: _Part) -> None:
        """Close a complete file, check its sha256, move it to the blobs or discard it (I/O thread)."""
        part.close()
        digest = part.hash.hexdigest()
        if digest != part.entry.sha256:
            part.path.unlink(missing_ok=True)
            raise InvalidArgument(
                f"{part.entry.path} failed its sha256 check (expected {part.entry.sha256[:16]}..., "
                f"got {digest[:16]}...); its bytes were discarded, push again to resend that file"
            )
        self.store.commit_blob(part.path, part.entry.sha256)
