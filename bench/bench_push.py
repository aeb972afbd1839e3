"""Push benchmark: PushArtifact throughput vs a raw TCP copy of the same bytes, and resume waste.

Run: .venv/bin/python bench/bench_push.py [--artifact DIR] [--repeat 7] [--json]

What is compared, and why it is fair:
- Every receiver runs in its own process, as the phone does: in one process the client's and the
  device's Python would share one GIL, a cost no deployment pays.
- The sender reads the same files in the push's chunk size; every receiver writes each file to
  disk and fsyncs it, as the push's staging does.
- Two baselines. "raw TCP copy" is `nc < file` with a disk writer: no framing, no checks; it is
  what the issue's >= 0.8 target is measured against. "verified TCP copy" also sha256-checks each
  file on the receiver, the one piece of work the push must do that a bare copy skips; the ratio
  against it isolates the protocol's own cost (gRPC framing, staging, atomic install).
- Runs are interleaved (copy, verified copy, push with the token, push to a daemon started
  with --insecure-loopback, in a rotating order) and reported as medians,
  because the shared 2-core build machine is noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NamedTuple

import grpc

from edgellm.client.client import MAX_MESSAGE_BYTES
from edgellm.common.allocator import tune_for_streaming
from edgellm.common.channel import ChannelSecurity, open_channel
from edgellm.common.paths import default_artifact_dir
from edgellm.common.pusher import CHUNK_BYTES, Pusher, PushProgress, load_local
from edgellm.common.tls import ClientTls
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import start_server
from edgellm.v1 import device_pb2, device_pb2_grpc

# Why spawn: a forked child would inherit the parent's gRPC threads and state.
_MP = mp.get_context("spawn")


class Interrupted(Exception):
    """Raised from the progress callback to cut a push off (a killed client)."""


def _tcp_receiver(conn: Connection, out: Path, files: list[tuple[str, int]], verify: bool) -> None:
    """Child process: accept one connection, write + fsync each file (sha256-check it if verify)."""
    srv = socket.create_server(("127.0.0.1", 0))
    conn.send(srv.getsockname()[1])
    peer, _ = srv.accept()
    with peer:
        view = memoryview(bytearray(CHUNK_BYTES))
        for sha, size in files:
            h = hashlib.sha256()
            left = size
            with (out / sha).open("wb") as fh:
                while left:
                    n = peer.recv_into(view, min(CHUNK_BYTES, left))
                    if not n:
                        raise OSError("sender closed early")
                    fh.write(view[:n])
                    if verify:
                        h.update(view[:n])
                    left -= n
                fh.flush()
                os.fsync(fh.fileno())
            if verify and h.hexdigest() != sha:
                raise OSError(f"{sha[:12]}: sha256 mismatch")
        peer.sendall(b"k")
    srv.close()


def raw_tcp_copy(artifact: Path, out: Path, verify: bool = False) -> float:
    """Send each distinct file over one TCP connection to a receiver process; seconds."""
    _, manifest = load_local(artifact)
    paths: dict[str, str] = {}
    for f in manifest.files:
        paths.setdefault(f.sha256, f.path)
    files = [(sha, size) for sha, size in manifest.unique_blobs().items()]
    parent, child = _MP.Pipe()
    proc = _MP.Process(target=_tcp_receiver, args=(child, out, files, verify))
    proc.start()
    port = parent.recv()
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        for sha, _ in files:
            # Read and send in the push's chunk size, as `nc < file` would; no zero-copy sendfile.
            with (artifact / paths[sha]).open("rb") as fh:
                while data := fh.read(CHUNK_BYTES):
                    s.sendall(data)
        if s.recv(1) != b"k":
            raise OSError("the receiver failed")
    seconds = time.perf_counter() - start
    proc.join()
    return seconds


class Daemon(NamedTuple):
    """Where the benchmark's daemon listens and the token it requires (None: insecure loopback)."""

    port: int
    token: str | None
    cert: bytes | None = None  # its TLS certificate (None: insecure loopback, plaintext)


def _daemon(conn: Connection, data_dir: Path, auth: bool) -> None:
    """Child process: a daemon on a free port until the parent closes the pipe."""

    async def serve() -> None:
        cfg = DaemonConfig.of(port=0, data_dir=data_dir, disk_reserve_bytes=0, insecure_loopback=not auth)
        d = await start_server(cfg)
        conn.send(Daemon(d.port, d.token, d.security.tls.cert.read_bytes() if d.security.tls else None))
        with contextlib.suppress(EOFError):
            await asyncio.to_thread(conn.recv_bytes)  # EOF when the parent is done
        await d.stop(0)

    asyncio.run(serve())


@contextlib.contextmanager
def daemon(data_dir: Path, auth: bool = True) -> Iterator[Daemon]:
    """A daemon in its own process (requiring its token unless AUTH is off); yields where it is."""
    parent, child = _MP.Pipe()
    proc = _MP.Process(target=_daemon, args=(child, data_dir, auth))
    proc.start()
    try:
        yield parent.recv()
    finally:
        parent.close()
        proc.join(10)
        if proc.is_alive():
            proc.terminate()


def channel(d: Daemon) -> grpc.Channel:
    """A client channel like DaemonClient's (the token over TLS to exactly its certificate)."""
    tls = ClientTls(roots=d.cert) if d.cert is not None else None
    security = ChannelSecurity(d.token, tls=tls) if d.token else ChannelSecurity.insecure_loopback()
    return open_channel(
        f"127.0.0.1:{d.port}",
        security,
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )


def push_once(d: Daemon, artifact: Path) -> float:
    """One complete push into an empty store, then delete it again; seconds of the push."""
    with channel(d) as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        report = Pusher(ch, artifact).run()
        if report.bytes_skipped:
            raise RuntimeError("the device already held part of the artifact")
        stub.DeleteArtifact(device_pb2.DeleteArtifactRequest(artifact_id=report.artifact_id))
    return report.seconds


def push_interrupted(d: Daemon, artifact: Path, at: float) -> dict[str, int]:
    """Cut a push off after `at` of the bytes, resume it, and count what was sent twice."""
    with channel(d) as ch:
        first = Pusher(ch, artifact, retries=0)

        def cut(p: PushProgress) -> None:
            if p.bytes_sent >= at * p.bytes_total:
                raise Interrupted

        first.on_progress = cut
        with contextlib.suppress(grpc.RpcError, Interrupted):
            first.run()
        time.sleep(0.5)  # let the device finish writing what it accepted
        status = first.status()
        held = sum(f.have_bytes for f in status.files)
        second = Pusher(ch, artifact)
        report = second.run()
        ok = (
            report.response is not None and report.response.artifact.artifact_id == first.manifest.artifact_id
        )
        return {
            "bytes_total": first.total,
            "sent_before_cut": first.sent,
            "held_after_cut": held,
            "sent_on_resume": second.sent,
            "resent_of_held": max(second.sent - (first.total - held), 0),
            "lost_in_flight": first.sent - held,
            "installed": int(ok),
        }


def _copy(artifact: Path, verify: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        return raw_tcp_copy(artifact, Path(tmp), verify)


def main() -> None:
    """Measure and print (or emit JSON)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, default=default_artifact_dir())
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    tune_for_streaming()  # as `edgellm push` does (src/edgellm/common/allocator.py)
    total = sum(load_local(ns.artifact)[1].unique_blobs().values())
    runs: dict[str, list[float]] = {"tcp": [], "tcp_verified": [], "push": [], "push_noauth": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        daemon(Path(tmp) / "device") as dev,
        daemon(Path(tmp) / "open", auth=False) as open_dev,
    ):
        jobs: dict[str, Callable[[], float]] = {
            "tcp": lambda: _copy(ns.artifact, verify=False),
            "tcp_verified": lambda: _copy(ns.artifact, verify=True),
            "push": lambda: push_once(dev, ns.artifact),
            "push_noauth": lambda: push_once(open_dev, ns.artifact),  # --insecure-loopback
        }
        order = list(jobs)
        for i in range(ns.repeat):
            rot = i % len(order)
            for name in order[rot:] + order[:rot]:
                runs[name].append(jobs[name]())
        resume = push_interrupted(dev, ns.artifact, 0.5)
    mbs = {k: total / statistics.median(v) / 1e6 for k, v in runs.items()}
    result = {
        "artifact_bytes": total,
        "raw_tcp_mb_s": round(mbs["tcp"], 1),
        "verified_tcp_mb_s": round(mbs["tcp_verified"], 1),
        "push_mb_s": round(mbs["push"], 1),
        "push_noauth_mb_s": round(mbs["push_noauth"], 1),
        "auth_vs_noauth": round(mbs["push"] / mbs["push_noauth"], 3),
        "ratio": round(mbs["push"] / mbs["tcp"], 3),
        "ratio_vs_verified": round(mbs["push"] / mbs["tcp_verified"], 3),
        "raw_tcp_seconds": [round(x, 3) for x in runs["tcp"]],
        "verified_tcp_seconds": [round(x, 3) for x in runs["tcp_verified"]],
        "push_seconds": [round(x, 3) for x in runs["push"]],
        "resume_at_50pct": resume,
    }
    if ns.json:
        print(json.dumps(result, indent=1))
    else:
        for k, v in result.items():
            print(f"{k:>20}: {v}")


if __name__ == "__main__":
    main()
