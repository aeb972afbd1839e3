"""`make demo`: start a real daemon, ask it the capital of France over gRPC, stop it."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.common.channel import ChannelSecurity, open_channel
from edgellm.common.pins import known_certs, trust_of
from edgellm.common.tokens import daemon_token_path

QUESTION = "What is the capital of France?"


def free_port() -> int:
    """A port the kernel says is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_serving(target: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Poll the health service until SERVING (the model is loaded and warm).

    Over TLS to the daemon's own certificate (it makes it on its first start, before it listens),
    as every client of a daemon that requires a token; health itself needs no token.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"daemon exited early with code {proc.returncode}")
        trust = trust_of(known_certs())
        if trust is not None:
            with open_channel(target, ChannelSecurity(None, tls=trust)) as channel:
                try:
                    resp = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=1.0
                    )
                    if resp.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
        time.sleep(0.2)  # polling the daemon's health
    raise SystemExit(f"daemon not serving after {timeout:.0f} s")


def main() -> int:
    """Run the demo; exit non-zero if anything fails."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--question", default=QUESTION)
    ns = parser.parse_args()
    target = f"127.0.0.1:{free_port()}"
    cli = [sys.executable, "-m", "edgellm.cli"]
    host, port = target.split(":")
    # The daemon logs warnings only, so its per-request log line doesn't interleave with the answer.
    daemon = subprocess.Popen(
        [
            *cli,
            "--log-level",
            "WARNING",
            "daemon",
            "--host",
            host,
            "--port",
            port,
            "--model",
            str(ns.artifact),
        ]
    )
    try:
        wait_serving(target, daemon, timeout=120)
        print(f"\n$ edgellm generate --target {target} --chat {ns.question!r}", flush=True)
        # Why its own token file: a client otherwise sends the first token it finds, and a host
        # token left by another daemon or service is not this daemon's (docs/security.md).
        own = ["--token-file", str(daemon_token_path())]
        rc = subprocess.call(
            [*cli, "generate", "--target", target, *own, "--chat", "--max-new-tokens", "64", ns.question]
        )
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    if rc == 0:
        print(
            "\nNext: `. .venv/bin/activate` puts `edgellm` on your PATH; then `edgellm daemon --model "
            "default` in one terminal and `edgellm chat` in another (README.md, 'Talk to the default model')."
        )
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
