"""The daemon on emulated aarch64, over real gRPC from the x86 client: answers, telemetry, window, push.

Every test here carries the marker `arm` (`make test-arm` runs them all); the first two also carry
`arm_smoke` (daemon up on aarch64, one Generate answering Paris), the part `make test` and CI run.
Nothing here times anything: emulation speed is no phone figure.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import grpc
import pytest

from edgellm.client.client import DaemonClient
from edgellm.common.pusher import Pusher
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc
from scripts.arm64_env import ArmEnv
from tests.arm.conftest import SD8G3, EmulatedDaemon, mnn_backend

# Emulation is slow: the first build (~4 min), a model load with its warm-up, a 200-token window
# run each take minutes.
pytestmark = [pytest.mark.arm, pytest.mark.timeout(1800)]

CAPITAL = [("user", "What is the capital of France?")]
REPORT = Path(__file__).resolve().parents[2] / ".cache" / "arm64" / "last-run.json"


def remember(**facts: object) -> None:
    """Add facts to the last run's report (printed by scripts/test_arm.py)."""
    old = json.loads(REPORT.read_text()) if REPORT.is_file() else {}
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps({**old, **facts}, indent=1))


@pytest.mark.arm_smoke
def test_the_daemon_runs_on_aarch64_and_mnn_picks_its_fp16_backend(
    arm_env: ArmEnv, arm_daemon: EmulatedDaemon
) -> None:
    machine = subprocess.run(
        arm_env.command(["-c", "import os; print(os.uname().machine)"]),
        env=arm_env.environ(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[-1]
    assert machine == "aarch64"
    (loaded,) = arm_daemon.events("engine_loaded")
    assert loaded["precision"] == "low"
    backend = mnn_backend(arm_daemon.log_text(), str(loaded["precision"]))
    cpu_line = next(line for line in arm_daemon.log_text().splitlines() if "The device supports" in line)
    remember(machine=machine, mnn_cpu_probe=cpu_line.strip(), mnn_backend=backend)
    assert backend == "Arm82Backend (fp16)"
    # MNN's KleidiAI kernels print "KleidiAI is running!" when one takes a layer; with this
    # artifact (INT4 asymmetric, block 32, memory low) MNN's own int8 kernels run instead.
    remember(kleidiai="KleidiAI is running" in arm_daemon.log_text())


@pytest.mark.arm_smoke
def test_greedy_capital_answers_paris(arm_daemon: EmulatedDaemon) -> None:
    with DaemonClient(arm_daemon.target, timeout=600) as client:
        out = client.generate(messages=CAPITAL, max_new_tokens=24)
    remember(capital_answer=out.text)
    assert "Paris" in out.text
    assert out.finish_reason == "stop"


def test_telemetry_streams_the_fixture_sysfs_tree(arm_daemon: EmulatedDaemon) -> None:
    zones = {}
    for zone in sorted((SD8G3 / "sys" / "class" / "thermal").glob("thermal_zone*")):
        temp = zone / "temp"
        if temp.is_file():
            zones[(zone / "type").read_text().strip()] = int(temp.read_text()) / 1000
    with grpc.insecure_channel(arm_daemon.target) as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        call = stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=500), timeout=120)
        samples = []
        for sample in call:
            samples.append(sample)
            if len(samples) == 2:
                call.cancel()
                break
    first, last = samples
    assert last.unix_time > first.unix_time
    got = {z.name: z.celsius for z in first.zones}
    assert got == pytest.approx(zones)
    assert first.skin_celsius > 0 and first.soc_celsius > 0
    assert len(first.cores) == 8 and {c.cluster for c in first.cores} == {0, 1, 2}  # the phone's clusters
    assert first.mem_total_bytes > 0 and first.rss_bytes > 0
    remember(telemetry_zones=len(got))


def test_a_long_generation_slides_the_window_and_stays_coherent(arm_daemon: EmulatedDaemon) -> None:
    request = device_pb2.GenerateRequest(
        messages=[
            common_pb2.ChatMessage(role="user", content="Write a long story about a dragon and a knight.")
        ],
        max_new_tokens=200,
        kv_window=64,
        sampling=device_pb2.SamplingParams(repetition_penalty=1.1, logit_bias={0: -100.0, 2: -100.0}),
    )
    with DaemonClient(arm_daemon.target, timeout=1200) as client:
        responses = list(client.stream(request))
    text = "".join(r.text for r in responses)
    stats = responses[-1].stats
    assert stats.completion_tokens == 200
    # 64-token window, 16-token evictions: the cache turned over ~3 times.
    assert stats.evicted_tokens >= stats.prompt_tokens + stats.completion_tokens - 64 > 2 * 64
    letters = sum(ch.isalpha() or ch.isspace() for ch in text) / len(text)
    words = text.split()
    remember(window_evicted=stats.evicted_tokens, window_text_head=text[:200])
    assert letters > 0.85
    assert len(set(words)) > 0.3 * len(words)
    assert "<|im_start|>" not in text and "\ufffd" not in text


def test_push_and_load_of_a_second_artifact(arm_daemon: EmulatedDaemon, second_artifact: Path) -> None:
    with grpc.insecure_channel(arm_daemon.target) as channel:
        report = Pusher(channel, second_artifact).run()
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        loaded = stub.LoadModel(device_pb2.LoadModelRequest(model=report.artifact_id), timeout=900)
        status = stub.GetStatus(device_pb2.GetStatusRequest(), timeout=30)
    assert report.bytes_sent == report.bytes_total > 0
    assert loaded.model.artifact_id == report.artifact_id == status.model.artifact_id
    with DaemonClient(arm_daemon.target, timeout=600) as client:
        out = client.generate(messages=CAPITAL, max_new_tokens=24)
    remember(second_artifact=status.model.name, second_answer=out.text)
    assert "Paris" in out.text


@pytest.mark.arm_smoke
def test_the_phone_set_has_no_matplotlib_and_its_own_cli_reads_the_status(
    arm_env: ArmEnv, arm_daemon: EmulatedDaemon
) -> None:
    """The emulated env holds what the phone installs (edgellm[device,client], with --gateway also
    [gateway]); its CLI works."""
    from scripts.arm64_env import facts

    found = facts(arm_env)
    assert found["host_side_importable"] == ["tqdm"]  # client's progress bars; no matplotlib, no torch
    status = subprocess.run(
        arm_env.command(["-m", "edgellm.cli", "status", "--target", arm_daemon.target, "--json"]),
        env=arm_env.environ(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert status.returncode == 0, status.stderr[-2000:]
    assert json.loads(status.stdout)["engine_state"] == "ENGINE_STATE_IDLE"
