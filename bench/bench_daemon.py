"""In-process MNN vs the daemon over gRPC: decode tok/s and TTFT, interleaved in one run.

The daemon runs in this process; the gRPC client runs in a separate process, as the laptop
client would (it shares this machine's two cores, so the figures are conservative).

The daemon requires its bearer token as a user's does, over TLS with its self-signed certificate
(the client trusts exactly that certificate, as a user's client does). `--compare-auth` starts a
second daemon with `--insecure-loopback` (plaintext, no token) and alternates requests between
the two, so the cost of TLS and the token is measured side by side.

Usage: python bench/bench_daemon.py --artifact .cache/artifacts/default [--reps 5] [--threads 2]
       [--compare-auth]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from edgellm.client.client import DaemonClient, build_request
from edgellm.common.channel import ChannelSecurity
from edgellm.common.tls import ClientTls
from edgellm.device.config import DaemonConfig
from edgellm.device.generation import GenerationJob, run_generation
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.device.sampler import SamplingConfig
from edgellm.engine.base import Engine
from edgellm.engine.kv_cache import KvCache
from edgellm.engine.kv_window import WindowPolicy

T = TypeVar("T")

NEW_TOKENS = 128
PROMPT_TOKENS = 72
NO_EOS = -float("inf")


def chat_prompt(engine: Engine, target: int) -> tuple[tuple[str, str], ...]:
    """Chat messages whose rendered prompt is exactly `target` tokens (trim the user text)."""
    text = (
        "I am planning a week-long trip through the south of France in early autumn and would like "
        "advice on which towns to visit, how to travel between them by train, what local dishes to try, "
        "and how much time to spend in each place so that the trip feels relaxed rather than rushed at all."
    )
    words = text.split(" ")
    for n in range(len(words), 0, -1):
        msgs = (("system", "You are a helpful travel assistant."), ("user", " ".join(words[:n])))
        if len(engine.encode(engine.apply_chat_template(msgs))) <= target:
            return msgs
    raise SystemExit("cannot build the prompt")


def in_process_raw(engine: Engine, ids: list[int]) -> tuple[float, float]:
    """Bare MNN loop (forward + argmax): (ttft_ms, decode tok/s)."""
    engine.reset()
    t0 = time.perf_counter()
    logits = engine.prefill(ids)
    logits[[*engine.stop_ids]] = NO_EOS
    tok = int(np.argmax(logits))
    t1 = time.perf_counter()
    for _ in range(NEW_TOKENS - 1):
        logits = engine.decode(tok)
        logits[[*engine.stop_ids]] = NO_EOS
        tok = int(np.argmax(logits))
    t2 = time.perf_counter()
    return (t1 - t0) * 1000, (NEW_TOKENS - 1) / (t2 - t1)


def in_process_engine(engine: Engine, msgs: tuple[tuple[str, str], ...]) -> tuple[float, float]:
    """Our generation loop in-process (template, sampler, UTF-8, stats): (ttft_ms, decode tok/s)."""
    job = GenerationJob("bench", None, msgs, NEW_TOKENS, sampling(engine))
    done = run_generation(KvCache(engine, WindowPolicy()), job, lambda _e: None, threading.Event())
    return done.stats.ttft_ms, done.stats.decode_tokens_per_second


def sampling(engine: Engine) -> SamplingConfig:
    """Greedy with end-of-turn tokens banned, so every run decodes exactly NEW_TOKENS."""
    return SamplingConfig(logit_bias=dict.fromkeys(engine.stop_ids, NO_EOS))


def through_grpc(
    client: DaemonClient, msgs: tuple[tuple[str, str], ...], stop_ids: list[int]
) -> tuple[float, float, float]:
    """(client TTFT ms, client-side decode tok/s, daemon-reported decode tok/s)."""
    request = build_request(None, msgs, NEW_TOKENS)
    for t in stop_ids:
        request.sampling.logit_bias[t] = NO_EOS
    t0 = time.perf_counter()
    first = last = 0.0
    n = 0
    daemon_tps = 0.0
    for r in client.stream(request):
        now = time.perf_counter()
        if r.token_ids:
            n += len(r.token_ids)
            if not first:
                first = now
            last = now
        if r.finish_reason:
            daemon_tps = r.stats.decode_tokens_per_second
    return (first - t0) * 1000, (n - 1) / (last - first), daemon_tps


class RemoteClient:
    """The gRPC client in its own process, as on the laptop; each `run()` is one timed request."""

    def __init__(
        self,
        target: str,
        msgs: tuple[tuple[str, str], ...],
        stop_ids: list[int],
        nice: int = 0,
        token: str | None = None,
        cert: Path | None = None,
    ) -> None:
        # A throwaway token of this run's temporary daemon: argv (visible in `ps`) is fine here.
        spec = json.dumps(
            {
                "target": target,
                "msgs": msgs,
                "stop_ids": stop_ids,
                "nice": nice,
                "token": token,
                "cert": str(cert) if cert else None,
            }
        )
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--client", spec],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self) -> tuple[float, float, float]:
        """Trigger one request and read its timings."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        ttft, tps, dtps = json.loads(self.proc.stdout.readline())
        return float(ttft), float(tps), float(dtps)

    def close(self) -> None:
        """End the client process."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


def client_main(spec: str) -> int:
    """Client process: connect once, then one request per 'go' line on stdin."""
    cfg = json.loads(spec)
    if cfg.get("nice"):
        # Models a client on another machine: it only gets cores the daemon leaves idle.
        os.nice(int(cfg["nice"]))
    msgs = tuple((r, c) for r, c in cfg["msgs"])
    # No token and no cert: a plain channel to an insecure-loopback daemon.
    cert = cfg.get("cert")
    tls = ClientTls(roots=Path(cert).read_bytes()) if cert else None
    security = ChannelSecurity(cfg.get("token"), tls=tls)
    with DaemonClient(cfg["target"], security=security) as client:
        client.wait_ready()
        for _ in sys.stdin:
            print(json.dumps(through_grpc(client, msgs, cfg["stop_ids"])), flush=True)
    return 0


class DaemonThread:
    """A real daemon (gRPC server + core) on its own event loop in a background thread."""

    def __init__(self, config: DaemonConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.running: RunningDaemon = self._call(start_server(config))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def on_worker(self, fn: Callable[[], T]) -> T:
        """Run fn on the daemon's engine worker thread (where its requests run) and wait."""
        return self.running.core.worker.call(fn).result()

    def stop(self) -> None:
        """Stop the server and the loop."""
        self._call(self.running.stop(0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def main() -> int:
    """Run the interleaved comparison and print a JSON summary.

    One process, one engine: the in-process runs execute on the daemon's own worker thread
    (same MNN instance, same threads), the gRPC runs go through a real server and client over
    loopback. Only the path differs, and A/B alternate so machine noise hits both.
    """
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--artifact", type=Path)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument(
        "--client-nice",
        type=int,
        default=0,
        help="run the client process at this nice level (19 ≈ a client on another machine)",
    )
    ap.add_argument(
        "--compare-auth",
        action="store_true",
        help="also run a daemon without a token (--insecure-loopback), alternating with the other",
    )
    ns = ap.parse_args()
    if ns.client:
        return client_main(ns.client)
    if ns.artifact is None:
        ap.error("--artifact is required")

    daemon = DaemonThread(
        DaemonConfig.of(port=0, model=ns.artifact, threads=ns.threads, data_dir=Path(tempfile.mkdtemp()))
    )
    loaded = daemon.running.core.models.loaded
    assert loaded is not None
    engine = loaded.engine
    msgs = daemon.on_worker(lambda: chat_prompt(engine, PROMPT_TOKENS))
    ids = daemon.on_worker(lambda: engine.encode(engine.apply_chat_template(msgs)))
    results: dict[str, list[tuple[float, float]]] = {"raw": [], "engine": [], "grpc": []}
    open_daemon: DaemonThread | None = None
    open_client: RemoteClient | None = None
    if ns.compare_auth:
        results["grpc_noauth"] = []
        open_daemon = DaemonThread(
            DaemonConfig.of(
                port=0,
                model=ns.artifact,
                threads=ns.threads,
                data_dir=Path(tempfile.mkdtemp()),
                insecure_loopback=True,
            )
        )
    daemon_side: list[float] = []
    daemon_side_noauth: list[float] = []
    stop_ids = sorted(engine.stop_ids)
    try:
        client = RemoteClient(
            f"127.0.0.1:{daemon.running.port}",
            msgs,
            stop_ids,
            nice=ns.client_nice,
            token=daemon.running.token,
            cert=daemon.running.security.tls.cert if daemon.running.security.tls else None,
        )
        client.run()  # warm the channel
        if open_daemon is not None:
            open_client = RemoteClient(
                f"127.0.0.1:{open_daemon.running.port}", msgs, stop_ids, ns.client_nice
            )
            open_client.run()
        for _ in range(ns.reps):
            results["raw"].append(daemon.on_worker(lambda: in_process_raw(engine, ids)))
            ttft, tps, dtps = client.run()
            results["grpc"].append((ttft, tps))
            daemon_side.append(dtps)
            if open_client is not None:
                ttft, tps, dtps = open_client.run()
                results["grpc_noauth"].append((ttft, tps))
                daemon_side_noauth.append(dtps)
            results["engine"].append(daemon.on_worker(lambda: in_process_engine(engine, msgs)))
        client.close()
        if open_client is not None:
            open_client.close()
    finally:
        daemon.stop()
        if open_daemon is not None:
            open_daemon.stop()

    def med(kind: str, i: int) -> float:
        return statistics.median(r[i] for r in results[kind])

    summary = {
        "prompt_tokens": len(ids),
        "new_tokens": NEW_TOKENS,
        "threads": ns.threads,
        "reps": ns.reps,
        "client_nice": ns.client_nice,
        "ttft_ms": {k: round(med(k, 0), 1) for k in results},
        "decode_tps": {k: round(med(k, 1), 1) for k in results},
        "daemon_reported_decode_tps": round(statistics.median(daemon_side), 1),
        "grpc_vs_raw_decode_ratio": round(med("grpc", 1) / med("raw", 1), 3),
        "grpc_vs_engine_decode_ratio": round(med("grpc", 1) / med("engine", 1), 3),
        "grpc_ttft_overhead_ms_vs_raw": round(med("grpc", 0) - med("raw", 0), 1),
        "grpc_ttft_overhead_ms_vs_engine": round(med("grpc", 0) - med("engine", 0), 1),
        "auth": "token over TLS (the daemon's self-signed certificate, trusted by the client)",
    }
    if ns.compare_auth:
        # Each daemon's own decode rate (its engine, no transport): where the two engine
        # instances differ, the client-side ratio above moves with them, not with the token.
        summary["noauth_daemon_reported_decode_tps"] = round(statistics.median(daemon_side_noauth), 1)
        summary["auth_vs_noauth_decode_ratio"] = round(med("grpc", 1) / med("grpc_noauth", 1), 3)
        summary["auth_vs_noauth_ttft_ms"] = round(med("grpc", 0) - med("grpc_noauth", 0), 1)
        # What the transport costs on each path, free of the two engines' own speeds: the client's
        # decode rate over its daemon's engine-side rate (1.0 = the transport costs nothing).
        tls_transport = med("grpc", 1) / statistics.median(daemon_side)
        plain_transport = med("grpc_noauth", 1) / statistics.median(daemon_side_noauth)
        summary["tls_client_vs_own_engine_decode"] = round(tls_transport, 3)
        summary["plaintext_client_vs_own_engine_decode"] = round(plain_transport, 3)
        summary["tls_vs_plaintext_transport_ratio"] = round(tls_transport / plain_transport, 3)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
