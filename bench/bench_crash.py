"""Crash consistency: `kill -9` the daemon at a random moment during a push, a load or a generation,
restart it, and check that nothing corrupt or half-installed is visible and that it serves again.

Run: .venv/bin/python -m bench.bench_crash [--runs 50] [--seed 14] [--artifact DIR] [--json OUT]

Each run picks a phase (push, load, generate) and a random delay, starts that operation against a
real daemon process (token on, as a user starts it), sends SIGKILL after the delay, and restarts
the daemon on the same data dir. Then:
- every artifact the store shows (on disk under store/artifacts and in ListModels) has every
  listed file at its size and sha256 (0 corrupt or half-installed artifacts allowed);
- health answers after the restart;
- the interrupted push resumes (GetArtifactStatus) to an install that LoadModel verifies by hash,
  and a Generate completes on it.
Before each push run the artifact is deleted (DeleteArtifact), so the push writes all its bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from edgellm.common.paths import default_artifact_dir
from edgellm.common.pusher import Pusher
from edgellm.device.store import parse_manifest
from edgellm.host.convert.pipeline import ensure_default_artifact
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.reliability.daemon_proc import DaemonProcess

PHASES = ("push", "push", "load", "generate")  # pushes write the most: half the runs


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def corrupt_artifacts(store: Path) -> list[str]:
    """Every installed artifact whose files do not all match their manifest (should be none)."""
    bad = []
    for art in sorted((store / "artifacts").glob("*")):
        try:
            m = parse_manifest((art / "manifest.json").read_bytes())
            for f in m.files:
                p = art / f.path
                if p.stat().st_size != f.size or sha256_of(p) != f.sha256:
                    bad.append(f"{art.name}: {f.path}")
        except (OSError, ValueError) as err:
            bad.append(f"{art.name}: {err}")
    return bad


def _in_thread(fn: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def one_run(
    daemon: DaemonProcess, artifact: Path, artifact_id: str, phase: str, delay: float
) -> dict[str, Any]:
    stub = device_pb2_grpc.DeviceDaemonStub(daemon.channel())
    outcome: dict[str, Any] = {"phase": phase, "delay_s": round(delay, 2)}
    work: Callable[[], object]
    if phase == "push":
        stub.UnloadModel(device_pb2.UnloadModelRequest(), timeout=60)  # a loaded artifact is not deleted
        try:
            stub.DeleteArtifact(device_pb2.DeleteArtifactRequest(artifact_id=artifact_id), timeout=60)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.NOT_FOUND:
                raise
        work = lambda: Pusher(daemon.channel(), artifact, retries=0).run()  # noqa: E731
    elif phase == "load":
        stub.UnloadModel(device_pb2.UnloadModelRequest(), timeout=60)
        work = lambda: stub.LoadModel(device_pb2.LoadModelRequest(model=artifact_id), timeout=120)  # noqa: E731
    else:
        req = device_pb2.GenerateRequest(prompt="1, 2, 3, 4, 5,", max_new_tokens=300)
        work = lambda: [r for r in stub.Generate(req, timeout=120)]  # noqa: E731
    finished = threading.Event()

    def run_work() -> None:
        try:
            work()
            finished.set()
        except grpc.RpcError:
            pass

    thread = _in_thread(run_work)
    time.sleep(delay)
    daemon.kill9()
    thread.join(30)
    # Whether the model should come back by itself, decided now: once restarted, the restore's own
    # loading marker would be on disk while it loads.
    data = daemon.data_dir
    should_restore = (data / "loaded.json").is_file() and not (data / "loading.json").is_file()
    outcome["finished_before_kill"] = finished.is_set()
    store = daemon.data_dir / "store"
    outcome["corrupt_on_disk"] = corrupt_artifacts(store)
    t0 = time.monotonic()
    daemon.start(want_serving=False)
    outcome["restart_s"] = round(time.monotonic() - t0, 2)
    # The model loaded before the kill comes back by itself (loaded.json) unless its load was the
    # one killed (loading.json left behind): wait for it only when it should come.
    outcome["should_restore_itself"] = should_restore
    if should_restore:
        try:
            outcome["health_after_restart"] = daemon.wait_health(want_serving=True, timeout=120)
        except TimeoutError:
            outcome["health_after_restart"] = daemon.health()
    else:
        outcome["health_after_restart"] = daemon.health()
    stub = device_pb2_grpc.DeviceDaemonStub(daemon.channel())
    listed = stub.ListModels(device_pb2.ListModelsRequest(), timeout=30)
    outcome["listed"] = len(listed.models)
    outcome["corrupt_listed"] = [
        m.artifact_id for m in listed.models if m.artifact_id not in _installed(store)
    ]
    report = Pusher(daemon.channel(), artifact).run()  # resumes from what GetArtifactStatus says
    outcome["resume_bytes_sent"] = report.bytes_sent
    outcome["resume_bytes_skipped"] = report.bytes_skipped
    if daemon.health() != "SERVING":
        stub.LoadModel(device_pb2.LoadModelRequest(model=artifact_id), timeout=120)  # verifies sha256
    last = [r for r in stub.Generate(device_pb2.GenerateRequest(prompt="Hi", max_new_tokens=4), timeout=60)][
        -1
    ]
    outcome["serves"] = daemon.health() == "SERVING" and last.stats.completion_tokens > 0
    return outcome


def _installed(store: Path) -> set[str]:
    return {p.name for p in (store / "artifacts").glob("*")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--artifact", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ns = ap.parse_args()
    rng = random.Random(ns.seed)
    artifact = ensure_default_artifact(ns.artifact or default_artifact_dir())
    artifact_id = parse_manifest((artifact / "manifest.json").read_bytes()).artifact_id
    runs: list[dict[str, Any]] = []
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edgellm-crash-") as tmp:
        daemon = DaemonProcess(Path(tmp) / "data", ("--threads", "1"))
        daemon.start(want_serving=False)
        try:
            Pusher(daemon.channel(), artifact).run()
            stub = device_pb2_grpc.DeviceDaemonStub(daemon.channel())
            stub.LoadModel(device_pb2.LoadModelRequest(model=artifact_id), timeout=120)
            for i in range(ns.runs):
                phase = rng.choice(PHASES)
                delay = rng.uniform(0.02, {"push": 0.8, "load": 2.5, "generate": 3.0}[phase])
                try:
                    outcome = one_run(daemon, artifact, artifact_id, phase, delay)
                except Exception as err:  # noqa: BLE001  (a failed run is a result: recorded, shown, counted)
                    outcome = {"phase": phase, "delay_s": round(delay, 2), "error": repr(err)[:500]}
                    if not daemon.alive():
                        daemon.start(want_serving=False)
                outcome["run"] = i + 1
                runs.append(outcome)
                print(json.dumps(outcome), flush=True)
        finally:
            daemon.stop()
    bad = [
        r
        for r in runs
        if r.get("error") or r.get("corrupt_on_disk") or r.get("corrupt_listed") or not r.get("serves")
    ]
    pushes = [
        r for r in runs if r["phase"] == "push" and not r.get("finished_before_kill") and "error" not in r
    ]
    restarts = [r["restart_s"] for r in runs if "restart_s" in r]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "runs": len(runs),
        "by_phase": {p: sum(r["phase"] == p for r in runs) for p in ("push", "load", "generate")},
        "killed_mid_operation": sum(not r.get("finished_before_kill") for r in runs),
        "corrupt_or_half_installed": sum(
            bool(r.get("corrupt_on_disk") or r.get("corrupt_listed")) for r in runs
        ),
        "restarts_serving": sum(bool(r.get("serves")) for r in runs),
        "failed_runs": bad,
        "interrupted_pushes": len(pushes),
        "interrupted_pushes_resumed_with_partial_data": sum(r["resume_bytes_skipped"] > 0 for r in pushes),
        "median_restart_s": statistics.median(restarts) if restarts else None,
        "should_restore_itself": sum(bool(r.get("should_restore_itself")) for r in runs),
        "serving_by_itself_after_restart": sum(r.get("health_after_restart") == "SERVING" for r in runs),
        "seconds": round(time.monotonic() - t_start, 1),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if ns.json:
        ns.json.write_text(text + "\n")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
