"""Fuzz run: N hostile requests (default 10,000) against a real daemon process serving the real model.

Run: .venv/bin/python -m bench.bench_fuzz [--n 10000] [--seed 14] [--artifact DIR] [--json OUT]
(from the repository root: the generator lives in tests/reliability/hostile.py, shared with the
500-request run in `make test`).

Reports the answers by status code, every unexpected one (INTERNAL, UNKNOWN, UNAVAILABLE, ...),
crashes, and the daemon's RSS after a warm-up of 200 calls, every 2,000 calls after it and at the
end, each measured after a model reload (see at_baseline; growth must stay under 5 %). The
daemon is started as a user starts it (token on) with --threads 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from edgellm.common.paths import default_artifact_dir
from edgellm.device.store import parse_manifest
from edgellm.host.convert.pipeline import ensure_default_artifact
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.reliability.daemon_proc import DaemonProcess
from tests.reliability.fuzz_setup import daemon_for_fuzz, fuzz_target
from tests.reliability.hostile import run_fuzz

WARMUP = 200
RSS_GROWTH_BAR = 0.05  # docs/reliability.md: RSS after reload grows < 5 % (also tests/reliability)
CHUNK = 500
BASELINE_EVERY = 2_000  # calls between reloaded RSS measurements (the growth curve)


def at_baseline(daemon: DaemonProcess, model_id: str) -> int:
    """RSS with the model freshly reloaded (UnloadModel, LoadModel with its warm-up).

    Why: MNN sizes its buffers and the KV cache to the longest input it has run, and a reload
    frees them, so RSS moves with the last hostile prompts and reloads (measured here: 318 -> 796
    MiB over prompts of 600..7,200 tokens; 334 -> 339 MiB over 8 reloads). Measuring both ends
    right after a reload leaves what could leak: the Python heap, gRPC, the store, the engine's
    own allocations across loads.
    """
    stub = device_pb2_grpc.DeviceDaemonStub(daemon.channel())
    stub.UnloadModel(device_pb2.UnloadModelRequest(), timeout=120)
    stub.LoadModel(device_pb2.LoadModelRequest(model=model_id), timeout=300)
    return settled_rss(daemon)


def settled_rss(daemon: DaemonProcess, timeout_s: float = 15.0) -> int:
    """RSS once two readings 0.5 s apart agree within 1 MiB (or after TIMEOUT_S, the last one).

    Why: the daemon returns free heap pages to the kernel when its engine goes idle, just after
    LoadModel answers (allocator.release_free_memory); a reading taken at once raced that trim
    and was 5-33 MiB high, differently at every point of the curve (measured 2026-12-04).
    """
    deadline = time.monotonic() + timeout_s
    last = daemon.rss()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = daemon.rss()
        if abs(now - last) < 1 << 20:
            return now
        last = now
    return last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--artifact", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    ns = ap.parse_args()
    artifact = ensure_default_artifact(ns.artifact or default_artifact_dir())
    with tempfile.TemporaryDirectory(prefix="edgellm-fuzz-") as tmp:
        daemon = daemon_for_fuzz(artifact, Path(tmp) / "data")
        daemon.start()
        try:
            target = fuzz_target(daemon, artifact)
            model_id = parse_manifest((artifact / "manifest.json").read_bytes()).artifact_id
            report = run_fuzz(target, WARMUP, ns.seed + 1)
            rss_start = at_baseline(daemon, model_id)
            curve = [{"calls": WARMUP, "rss_mib": round(rss_start / 2**20, 1)}]
            # In rounds of CHUNK calls (each its own seed), with a checkpoint after each, so a
            # run cut short still leaves its figures.
            done = WARMUP
            while done < ns.n:
                k = min(CHUNK, ns.n - done)
                report = run_fuzz(target, k, ns.seed * 1000 + done, report)
                done += k
                point = {"calls": report.calls, "rss_mib": round(daemon.rss() / 2**20, 1), **report.summary()}
                if (done - WARMUP) % BASELINE_EVERY == 0 and done < ns.n:
                    curve.append({"calls": done, "rss_mib": round(at_baseline(daemon, model_id) / 2**20, 1)})
                    point["rss_after_reload_mib"] = curve[-1]["rss_mib"]
                keys = ("calls", "rss_mib", "rss_after_reload_mib", "codes", "unexpected_count")
                print(json.dumps({k: point[k] for k in keys if k in point}))
                if ns.json:
                    ns.json.with_suffix(".partial.json").write_text(json.dumps(point, indent=2) + "\n")
            rss_end = at_baseline(daemon, model_id)
            curve.append({"calls": done, "rss_mib": round(rss_end / 2**20, 1)})
            target.restore()
            healthy = daemon.health()
        finally:
            rc = daemon.stop()
        result = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "n": ns.n,
            "rounds": f"{WARMUP} warm-up calls (seed+1), then rounds of {CHUNK} (seed*1000+offset)",
            "seed": ns.seed,
            **report.summary(),
            "rss_after_warmup_mib": round(rss_start / 2**20, 1),
            "rss_end_mib": round(rss_end / 2**20, 1),
            "rss_growth_pct": round(100 * (rss_end - rss_start) / rss_start, 2),
            "rss_after_reload_curve": curve,
            "health_after": healthy,
            "daemon_exit": rc,
        }
    text = json.dumps(result, indent=2)
    print(text)
    if ns.json:
        ns.json.write_text(text + "\n")
    ok = report.crashes == 0 and not report.unexpected and healthy == "SERVING" and rc == 0
    return 0 if ok and result["rss_growth_pct"] < 100 * RSS_GROWTH_BAR else 1


if __name__ == "__main__":
    sys.exit(main())
