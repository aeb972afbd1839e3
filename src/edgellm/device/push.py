"""Receive a pushed artifact: stage chunks, verify each file's sha256, install atomically.

Writes and hashing run on one helper thread per push (both release the GIL), pipelined behind
the network reads in batches of a few MiB, so there is one thread hop per batch rather than per
chunk and a push costs little more than the bytes themselves. A staged file's size is
its persisted offset: a push that dies (client killed, link dropped, daemon restarted) resumes
there, and the hash check at the end of each file catches anything a crash tore.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from edgellm.common.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from edgellm.common.logs import get_logger
from edgellm.common.manifest import FileEntry
from edgellm.common.push_manifest import PushManifest, parse_manifest
from edgellm.common.push_wire import PushMessage
from edgellm.device.store.store import ArtifactStore, StoreStatus
from edgellm.engine.artifact import Artifact

log = get_logger(__name__)

MAX_CHUNK_BYTES = 4 << 20
# Why 8 MiB: one I/O-thread job per batch keeps the loop's per-chunk cost to a list append, and
# two batches (one being written, one filling) bound the memory a push holds.
BATCH_BYTES = 8 << 20


ReadyFn = Callable[[StoreStatus], Awaitable[None]]


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
        # O_NOFOLLOW: a staged part is only ever a regular file the store made, never a link.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        fh = os.fdopen(fd, "ab+")
        size = fh.seek(0, os.SEEK_END)
        if size > self.entry.size:  # more than the file can hold: stale or torn, start over
            fh.truncate(0)
            size = 0
        fh.seek(0)
        while block := fh.read(1 << 20):
            self.hash.update(block)
        self.fh = fh
        self.written = self.offset = size

    def write(self, data: memoryview, offset: int) -> None:
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
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def drain(self, wait_s: float = 30.0) -> None:
        """Wait until every push has left its bytes on disk (a cancelled one finishes its last batch).

        Why: the server's stop cancels push handlers but returns before their cleanup ran; a
        daemon restarted on the same data dir in the same process then read a part's size while
        the old push was still writing it, and resumed from a wrong offset (tests/push flake).
        """
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), wait_s)

    async def receive(self, messages: AsyncIterator[PushMessage], ready: ReadyFn | None = None) -> PushResult:
        """Consume one push stream (manifest first, then chunks) and install the artifact.

        `ready` is awaited with the store's status once this push holds the artifact's lock: a
        client that waits for it sends nothing while another push of the same artifact runs, and
        plans its chunks from what the device holds then (nothing, if that push installed it).
        """
        first = await anext(messages, None)
        if first is not None and first.error:
            raise InvalidArgument(first.error)
        if first is None or first.manifest_json is None:
            raise InvalidArgument("a push must start with a message carrying manifest_json")
        manifest = parse_manifest(first.manifest_json)
        lock = self._locks.setdefault(manifest.artifact_id, asyncio.Lock())
        self._active += 1
        self._idle.clear()
        try:
            async with lock:
                try:
                    return await self._receive(manifest, messages, ready)
                finally:
                    self.store.release(manifest.artifact_id)
        finally:
            self._active -= 1
            if not self._active:
                self._idle.set()

    async def _receive(
        self,
        manifest: PushManifest,
        messages: AsyncIterator[PushMessage],
        ready: ReadyFn | None,
    ) -> PushResult:
        store = self.store
        # Store calls stat, hash-free walks and fsync: off the event loop, so streams keep flowing (S22).
        status = await asyncio.to_thread(store.status, manifest)
        if ready is not None:
            await ready(status)
        if status.installed:
            art = await asyncio.to_thread(store.install, manifest)  # no-op apart from dropping staging
            return PushResult(art, 0, manifest.total_bytes)
        await asyncio.to_thread(store.check_name_free, manifest)
        await asyncio.to_thread(store.reserve, manifest, status)
        await asyncio.to_thread(store.begin, manifest)
        log.info("push_started", artifact_id=manifest.artifact_id[:12], missing=status.missing_bytes)
        session = _PushSession(store, manifest)
        try:
            async for msg in messages:
                await session.accept_chunk(msg)
            return await session.finish()
        finally:
            session.close()


class _PushSession:
    """One push after its manifest: files being written, the batch filling, the batch on the I/O thread."""

    def __init__(self, store: ArtifactStore, manifest: PushManifest) -> None:
        self.store = store
        self.manifest = manifest
        self.io = ThreadPoolExecutor(1, thread_name_prefix="push-io")
        self.loop = asyncio.get_running_loop()
        self.parts: dict[str, _Part] = {}  # by sha256: files with bytes still to come
        self.batch: list[tuple[_Part, memoryview, int]] = []
        self.batch_bytes = 0
        self.writing: Future[None] | None = None  # the batch on the I/O thread
        self.received = 0
        self.skipped = 0
        # sha256 -> in the blob store when this push first met it (a blob that arrives meanwhile
        # from another push is written once more and replaces itself: harmless).
        self.present: dict[str, bool] = {}

    # -- per message ---------------------------------------------------------------------------------
    async def accept_chunk(self, msg: PushMessage) -> None:
        """Check one chunk against the manifest and what is on disk; queue its new bytes."""
        if msg.error:
            raise InvalidArgument(msg.error)
        if not msg.is_chunk:
            raise InvalidArgument("only the first message of a push may carry a manifest")
        data = msg.data  # a view into the received message: written and hashed without a copy
        entry = self._entry(msg.path, msg.offset, len(data))
        if await self._has_blob(entry):
            self.skipped += len(data)
            return
        part = await self._part(entry)
        if msg.offset > part.offset:
            raise InvalidArgument(
                f"chunk {msg.path}@{msg.offset} leaves a gap: the device has {part.offset} bytes "
                "(ask GetArtifactStatus where to resume)"
            )
        new = data[part.offset - msg.offset :]  # a resent prefix is skipped
        self.skipped += len(data) - len(new)
        if new:
            self._queue(part, new)
            if part.offset == entry.size:
                await self.flush(wait=True)
                await self._run(self._verify, part)
                del self.parts[entry.sha256]
                self.present[entry.sha256] = True
            elif self.batch_bytes >= BATCH_BYTES:
                await self.flush(wait=False)

    async def _has_blob(self, entry: FileEntry) -> bool:
        """Whether the store holds this content already: stat'ed once per file, off the event loop (S22)."""
        known = self.present.get(entry.sha256)
        if known is None:
            known = self.present[entry.sha256] = await asyncio.to_thread(
                self.store.has_blob, entry.sha256, entry.size
            )
        return known

    def _entry(self, path: str, offset: int, n: int) -> FileEntry:
        entry = self.manifest.entry(path)
        if n > MAX_CHUNK_BYTES:
            raise InvalidArgument(f"chunk of {n} bytes for {path}; at most {MAX_CHUNK_BYTES}")
        if offset + n > entry.size:
            raise InvalidArgument(f"chunk {path}@{offset}+{n} runs past the manifest's size {entry.size}")
        return entry

    async def _part(self, entry: FileEntry) -> _Part:
        part = self.parts.get(entry.sha256)
        if part is None:
            path = self.store.part(self.manifest.artifact_id, entry.sha256)
            part = self.parts[entry.sha256] = _Part(path, entry)
            await self._run(part.open)
        return part

    def _queue(self, part: _Part, data: memoryview) -> None:
        self.received += len(data)
        self.batch.append((part, data, part.offset))
        self.batch_bytes += len(data)
        part.offset += len(data)

    # -- I/O thread ----------------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        # Why shield: cancelling a wrapped future cancels a queued job, and a skipped write
        # would leave a hole that the next push resumes after.
        return await asyncio.shield(asyncio.wrap_future(self.io.submit(fn, *args), loop=self.loop))

    async def flush(self, wait: bool) -> None:
        """Wait for the batch being written, hand over the one filling; wait for it too if asked."""
        if self.writing is not None:
            done, self.writing = self.writing, None
            await asyncio.shield(asyncio.wrap_future(done, loop=self.loop))
        if self.batch:
            self.writing = self.io.submit(_write_batch, self.batch)
            self.batch, self.batch_bytes = [], 0
        if wait and self.writing is not None:
            await self.flush(False)

    def _verify(self, part: _Part) -> None:
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

    # -- end of stream -------------------------------------------------------------------------------
    async def finish(self) -> PushResult:
        """The stream ended: write what is left, verify every complete file, install if all are there."""
        await self.flush(wait=True)
        for part in list(self.parts.values()):  # zero-length files and parts already full
            if part.offset == part.entry.size:
                await self._run(self._verify, part)
                del self.parts[part.entry.sha256]
        await self._verify_staged()
        store, manifest = self.store, self.manifest
        missing = await asyncio.to_thread(
            lambda: [f for f in manifest.files if not store.has_blob(f.sha256, f.size)]
        )
        if missing:
            status = await asyncio.to_thread(store.status, manifest)  # stats: off the event loop (S22)
            gap = sum(st.size - st.have_bytes for st in status.files if not st.complete)
            raise FailedPrecondition(
                f"push ended with {len(missing)} of {len(manifest.files)} files incomplete "
                f"({gap} bytes missing, e.g. {missing[0].path}); push again to resume"
            )
        art = await self.loop.run_in_executor(self.io, store.install, manifest)
        log.info("push_installed", artifact_id=manifest.artifact_id[:12], received=self.received)
        return PushResult(art, self.received, self.skipped)

    async def _verify_staged(self) -> None:
        """Empty files, and files a push cut off before its check left complete in staging."""
        for f in await asyncio.to_thread(self._staged_complete):  # stats: off the event loop (S22)
            part = _Part(self.store.part(self.manifest.artifact_id, f.sha256), f)
            await self._run(part.open)
            await self._run(self._verify, part)

    def _staged_complete(self) -> list[FileEntry]:
        """Files whose staged part is whole but not yet checked and moved to the blobs (a thread)."""
        out: dict[str, FileEntry] = {}  # by content: two files with one content share one part
        for f in self.manifest.files:
            staged = self.store.part(self.manifest.artifact_id, f.sha256)
            full = f.size == 0 or (staged.is_file() and staged.stat().st_size == f.size)
            if full and not self.store.has_blob(f.sha256, f.size):
                out.setdefault(f.sha256, f)
        return list(out.values())

    def close(self) -> None:
        """Leave every accepted byte on disk and stop the I/O thread, even when the push failed.

        Why wait here even when cancelled: the next push of this artifact must see every byte this
        one accepted on disk, or it would resume from a wrong offset. A failed batch stops the ones
        after it at their offset check, so no hole is written.
        """
        if self.batch:
            self.io.submit(_write_batch, self.batch)
        for part in self.parts.values():
            self.io.submit(part.close)
        self.io.shutdown(wait=True)


def _write_batch(batch: list[tuple[_Part, memoryview, int]]) -> None:
    """Write and hash a batch of chunks in order (I/O thread)."""
    for part, data, offset in batch:
        part.write(data, offset)
