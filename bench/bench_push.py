"""Push benchmark: PushArtifact throughput vs a raw TCP copy of the same bytes, and resume waste.

Run: .venv/bin/python bench/bench_push.py [--artifact DIR] [--repeat 3] [--json]
Both sides run on this machine over loopback, and both receivers write to disk and fsync each
file, so the ratio measures the protocol (gRPC framing, staging, sha256 verification, install).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import grpc

from clients.client import MAX_MESSAGE_BYTES
from clients.push import CHUNK_BYTES, Pusher, PushProgress, load_local
from common.paths import default_artifact_dir
from device_daemon.config import DaemonConfig
from device_daemon.server import RunningDaemon, start_server
from edgellm.v1 import device_pb2_grpc

T = TypeVar("T")


class Interrupted(Exception):
    """Raised from the progress callback to cut a push off (a killed client)."""


def raw_tcp_copy(artifact: Path, out: Path) -> float:
    """Send every manifest file over one TCP connection to a receiver that writes + fsyncs; seconds."""
    _, manifest = load_local(artifact)
    files = [f for f in manifest.files]
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def receive() -> None:
        conn, _ = srv.accept()
        with conn:
            for f in files:
                left = f.size
                with (out / f.sha256).open("wb") as fh:
                    while left:
                        data = conn.recv(min(CHUNK_BYTES, left))
                        if not data:
                            raise OSError("sender closed early")
                        fh.write(data)
                        left -= len(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            conn.sendall(b"k")

    t = threading.Thread(target=receive)
    t.start()
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        for f in files:
            # Read and send in the push's chunk size, as `nc < file` would; no zero-copy sendfile.
            with (artifact / f.path).open("rb") as fh:
                while data := fh.read(CHUNK_BYTES):
                    s.sendall(data)
        s.recv(1)
    seconds = time.perf_counter() - start
    t.join()
    srv.close()
    return seconds


def channel(port: int) -> grpc.Channel:
    """A client channel like DaemonClient's."""
    return grpc.insecure_channel(
        f"127.0.0.1:{port}",
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )


def push_once(port: int, artifact: Path) -> float:
    """One complete push into an empty store; seconds."""
    with channel(port) as ch:
        report = Pusher(device_pb2_grpc.DeviceDaemonStub(ch), artifact).run()
    return report.seconds


def push_interrupted(port: int, artifact: Path, at: float) -> dict[str, int]:
    """Cut a push off after `at` of the bytes, resume it, and count what was sent twice."""
    with channel(port) as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        first = Pusher(stub, artifact, retries=0)

        def cut(p: PushProgress) -> None:
            if p.bytes_sent >= at * p.bytes_total:
                raise Interrupted

        first.on_progress = cut
        with contextlib.suppress(grpc.RpcError, Interrupted):
            first.run()
        time.sleep(0.5)  # let the device finish writing what it accepted
        status = first.status()
        held = sum(f.have_bytes for f in status.files)
        second = Pusher(stub, artifact)
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


async def with_daemon(data_dir: Path, fn: Callable[..., T], *args: object) -> T:
    """Run fn(port, *args) in a thread against a fresh daemon."""
    d: RunningDaemon = await start_server(DaemonConfig(port=0, data_dir=data_dir, disk_reserve_bytes=0))
    try:
        return await asyncio.to_thread(fn, d.port, *args)
    finally:
        await d.stop(0)


def main() -> None:
    """Measure and print (or emit JSON)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, default=default_artifact_dir())
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    total = sum(load_local(ns.artifact)[1].unique_blobs().values())
    tcp, grpc_s = [], []
    for i in range(ns.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            tcp.append(raw_tcp_copy(ns.artifact, Path(tmp)))
        with tempfile.TemporaryDirectory() as tmp:
            grpc_s.append(asyncio.run(with_daemon(Path(tmp) / f"d{i}", push_once, ns.artifact)))
    with tempfile.TemporaryDirectory() as tmp:
        resume = asyncio.run(with_daemon(Path(tmp), push_interrupted, ns.artifact, 0.5))
    tcp_mbs = total / statistics.median(tcp) / 1e6
    push_mbs = total / statistics.median(grpc_s) / 1e6
    result = {
        "artifact_bytes": total,
        "raw_tcp_mb_s": round(tcp_mbs, 1),
        "push_mb_s": round(push_mbs, 1),
        "ratio": round(push_mbs / tcp_mbs, 3),
        "raw_tcp_seconds": [round(s, 3) for s in tcp],
        "push_seconds": [round(s, 3) for s in grpc_s],
        "resume_at_50pct": resume,
    }
    if ns.json:
        print(json.dumps(result, indent=1))
    else:
        for k, v in result.items():
            print(f"{k:>18}: {v}")


if __name__ == "__main__":
    main()
