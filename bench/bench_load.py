"""Load: 8 concurrent clients x 100 Generate requests against a real daemon process, with cancels and
deadlines mixed in; every answer must be complete or a by-design refusal, and nothing may wedge or leak.

Run: .venv/bin/python -m bench.bench_load [--clients 8] [--requests 100] [--tokens 8] [--json OUT]

Each client sends its requests one after another on its own channel. Every 10th request is
cancelled after its first token (call.cancel()), every 10th (offset 5) carries a 0.3 s deadline,
and every 25th asks the daemon to Cancel it by request id. Checked: each normal request ends with
a finish reason (complete), or RESOURCE_EXHAUSTED (queue full, by design); no request takes longer
than 120 s (a wedge); afterwards the queue is empty, a fresh request completes, and the daemon's
RSS after the run is compared with its RSS after a warm-up of one request per client.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc

from edgellm.common.paths import default_artifact_dir
from edgellm.common.pusher import Pusher
from edgellm.host.convert.pipeline import ensure_default_artifact
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.reliability.daemon_proc import DaemonProcess

WEDGE_S = 120.0


def one_request(
    stub: device_pb2_grpc.DeviceDaemonStub, client: int, i: int, tokens: int
) -> tuple[str, float]:
    """Send request I of CLIENT; (outcome, seconds)."""
    rid = f"load-{client}-{i}"
    req = device_pb2.GenerateRequest(
        prompt=f"Count from {i}:",
        max_new_tokens=tokens,
        request_id=rid,
        sampling=device_pb2.SamplingParams(temperature=0.0),
    )
    t0 = time.monotonic()
    kind = (
        "cancel"
        if i % 10 == 0
        else "deadline"
        if i % 10 == 5
        else "remote_cancel"
        if i % 25 == 3
        else "plain"
    )
    call = stub.Generate(req, timeout=0.3 if kind == "deadline" else WEDGE_S)
    try:
        last = None
        for n, resp in enumerate(call):
            last = resp
            if n == 0 and kind == "cancel":
                call.cancel()
            if n == 0 and kind == "remote_cancel":
                stub.Cancel(device_pb2.CancelRequest(request_id=rid), timeout=10)
        assert last is not None
        reason = device_pb2.FinishReason.Name(last.finish_reason)
        return (f"{kind}:{reason}", time.monotonic() - t0)
    except grpc.RpcError as err:
        return (f"{kind}:{err.code().name}", time.monotonic() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--artifact", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ns = ap.parse_args()
    artifact = ensure_default_artifact(ns.artifact or default_artifact_dir())
    outcomes: Counter[str] = Counter()
    seconds: list[float] = []
    lock = threading.Lock()
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edgellm-load-") as tmp:
        daemon = DaemonProcess(Path(tmp) / "data", ("--threads", "1"))
        daemon.start(want_serving=False)
        try:
            artifact_id = Pusher(daemon.channel(), artifact).run().artifact_id
            stubs = [device_pb2_grpc.DeviceDaemonStub(daemon.channel()) for _ in range(ns.clients)]
            stubs[0].LoadModel(device_pb2.LoadModelRequest(model=artifact_id), timeout=120)
            for c, stub in enumerate(stubs):  # warm-up: one request per client
                one_request(stub, c, 1, ns.tokens)
            rss_before = daemon.rss()

            def client(c: int) -> None:
                for i in range(ns.requests):
                    outcome, s = one_request(stubs[c], c, i, ns.tokens)
                    with lock:
                        outcomes[outcome] += 1
                        seconds.append(s)

            threads = [threading.Thread(target=client, args=(c,)) for c in range(ns.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            time.sleep(1.0)  # let cancelled work drain
            status = stubs[0].GetStatus(device_pb2.GetStatusRequest(), timeout=10)
            after, s_after = one_request(stubs[0], 0, 7, ns.tokens)
            rss_after = daemon.rss()
            alive = daemon.alive()
        finally:
            rc = daemon.stop()
    plain_bad = {
        k: n
        for k, n in outcomes.items()
        if k.startswith("plain:")
        and k not in ("plain:FINISH_REASON_LENGTH", "plain:FINISH_REASON_STOP", "plain:RESOURCE_EXHAUSTED")
    }
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "clients": ns.clients,
        "requests_per_client": ns.requests,
        "max_new_tokens": ns.tokens,
        "outcomes": dict(sorted(outcomes.items())),
        "incomplete_plain_requests": plain_bad,
        "wedged": sum(s >= WEDGE_S for s in seconds),
        "p50_s": round(statistics.median(seconds), 2),
        "p99_s": round(sorted(seconds)[int(0.99 * (len(seconds) - 1))], 2),
        "max_s": round(max(seconds), 2),
        "queue_depth_after": status.queue_depth,
        "fresh_request_after": after,
        "fresh_request_after_s": round(s_after, 2),
        "rss_after_warmup_mib": round(rss_before / 2**20, 1),
        "rss_after_mib": round(rss_after / 2**20, 1),
        "rss_growth_pct": round(100 * (rss_after - rss_before) / rss_before, 2),
        "daemon_alive": alive,
        "daemon_exit": rc,
        "seconds": round(time.monotonic() - t_start, 1),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if ns.json:
        ns.json.write_text(text + "\n")
    ok = (
        not plain_bad
        and not result["wedged"]
        and status.queue_depth == 0
        and after.startswith("plain:FINISH")
    )
    return 0 if ok and alive and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
