"""The real `edgellm daemon` under qemu-aarch64, driven from this host's x86 client (make test-arm).

The emulated Python holds edgellm with its device dependencies only (scripts/arm64_env.py); these
fixtures start the daemon as a subprocess on a loopback port and read its log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.common.tls import ClientTls
from scripts.arm64_env import ArmEnv, ensure

REPO = Path(__file__).resolve().parents[2]
SD8G3 = REPO / "tests" / "fixtures" / "sysfs" / "sd8gen3"
# A model load plus a 32-token warm-up runs ~1-2 minutes under emulation on a busy 2-core host.
START_TIMEOUT_S = 900
# MNN prints this once per process when it probes the CPU (source/backend/cpu/CPURuntime.cpp).
MNN_CPU_LINE = re.compile(r"The device supports: i8sdot:(\d), fp16:(\d), i8mm: (\d), sve2: (\d), sme2: (\d)")


@dataclass
class EmulatedDaemon:
    """A daemon process running on the emulated aarch64 CPU."""

    process: subprocess.Popen[bytes]
    log_path: Path
    port: int = 0

    @property
    def target(self) -> str:
        """host:port for the x86 client."""
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        """Everything the process wrote (structlog JSON lines and MNN's own prints)."""
        return self.log_path.read_text(errors="replace")

    def events(self, name: str) -> list[dict[str, object]]:
        """The daemon's JSON log records with event == name."""
        out = []
        for line in self.log_text().splitlines():
            if line.startswith("{"):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record.get("event") == name:
                    out.append(record)
        return out

    def stop(self) -> int:
        """SIGTERM (graceful stop), then SIGKILL after 60 s; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


def mnn_backend(log_text: str, precision: str) -> str:
    """Which MNN CPU backend ran, from MNN's CPU probe line and the precision the engine set.

    MNN 3.6.1 (CPURuntime::onCreate, source/backend/cpu/CPUBackend.cpp) creates an Arm82Backend,
    fp16 arithmetic and an fp16 KV cache, exactly when the CPU reports fp16 arithmetic and the
    precision is low; otherwise the plain CPUBackend in fp32.
    """
    m = MNN_CPU_LINE.search(log_text)
    if m is None:
        raise AssertionError("MNN never printed its CPU probe line")
    fp16 = m.group(2) == "1"
    return "Arm82Backend (fp16)" if fp16 and precision == "low" else "CPUBackend (fp32)"


def _health_channel(target: str, tls: ClientTls | None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(target)
    credentials, options = tls.credentials(target)
    return grpc.secure_channel(target, credentials, options)


def wait_serving(
    daemon: EmulatedDaemon, timeout_s: float = START_TIMEOUT_S, tls_of: Path | None = None
) -> None:
    """Wait until the daemon logs its port and its health check says SERVING (model loaded).

    tls_of: the daemon's certificate file (a daemon with its token and TLS): health over TLS to it.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if daemon.process.poll() is not None:
            raise AssertionError(
                f"emulated daemon exited ({daemon.process.returncode}):\n{daemon.log_text()[-4000:]}"
            )
        listening = daemon.events("daemon_listening")
        if listening:
            daemon.port = int(str(listening[-1]["port"]))
            tls = ClientTls(roots=tls_of.read_bytes()) if tls_of is not None else None
            with _health_channel(daemon.target, tls) as channel:
                try:
                    reply = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=10
                    )
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
        time.sleep(2)
    raise AssertionError(f"emulated daemon not serving after {timeout_s:.0f} s:\n{daemon.log_text()[-4000:]}")


def start_daemon(
    env: ArmEnv,
    artifact: Path,
    data_dir: Path,
    log_path: Path,
    extra: Sequence[str] = (),
    secure: bool = False,
    environ: dict[str, str] | None = None,
) -> EmulatedDaemon:
    """`edgellm daemon` on the emulated CPU, port 0 (read back from its log), the sd8gen3 sysfs tree.

    secure: with its token and TLS as on the phone (made in data_dir on first start), not
    --insecure-loopback.
    """
    args = [
        "-m",
        "edgellm.cli",
        "--log-json",
        "daemon",
        "--port",
        "0",
        "--model",
        str(artifact),
        "--data-dir",
        str(data_dir),
        "--sysfs-root",
        str(SD8G3),
        "--warmup-tokens",
        "32",  # the default 256 costs minutes under emulation and only sizes memory pools
        # Insecure by default: the host-side test client carries no token (auth: tests/rpc/test_auth.py).
        *([] if secure else ["--insecure-loopback"]),
        "--threads",
        "2",  # pinned: autotune would load the model once per candidate, minutes each under emulation
        # Why off: with drafting on, the load also times ~25 verify forwards after the warm-up
        # (decoding.measure_forward_costs) — past the 900 s start timeout under emulation on a
        # loaded host (seen 2026-12-03). Speculation is no ARM-specific path; x86 tests cover it.
        "--draft-max",
        "0",
        # Why off: the sd8gen3 fixture tree is static, so the thermal governor never sees its
        # throttling cool anything and paced decode down to a 0.05 duty cycle — 20x the emulated
        # generation time (seen 2026-12-03).
        # The governor is pure arithmetic with no ARM-specific path; the virtual-phone tests cover it.
        "--governor",
        "off",
        *extra,
    ]
    log = log_path.open("wb")
    process = subprocess.Popen(
        env.command(args), env=environ or env.environ(), stdout=log, stderr=subprocess.STDOUT
    )
    log.close()
    daemon = EmulatedDaemon(process, log_path)
    try:
        wait_serving(daemon, tls_of=data_dir / "tls" / "cert.pem" if secure else None)
    except BaseException:
        daemon.stop()
        raise
    return daemon


ARM_TESTS = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    """`pytest tests/arm -k NAME` runs the emulated tests it names, by themselves.

    Why: addopts' default -m ("not arm or arm_smoke") keeps all but the smoke out of `make test`; a
    command that points at tests/arm and picks tests with -k, giving no -m of its own, asks for
    them by name, so only `slow` stays out (`make test-arm` passes its own -m).
    """
    args = [str(a) for a in config.invocation_params.args]
    own_m = any(a == "-m" or (a.startswith("-m") and not a.startswith("--")) for a in args)
    paths = [Path(a.split("::")[0]).resolve() for a in args if not a.startswith("-")]
    if config.option.keyword and not own_m and any(p.is_relative_to(ARM_TESTS) for p in paths):
        config.option.markexpr = "not slow"


@pytest.fixture(scope="session")
def arm_env() -> ArmEnv:
    """The emulated arm64 Python (built on first use, then cached under .cache/arm64)."""
    return ensure()


@pytest.fixture(scope="session")
def arm_daemon(
    arm_env: ArmEnv, default_artifact: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmulatedDaemon]:
    """One emulated daemon with the default artifact, shared by the ARM tests."""
    work = tmp_path_factory.mktemp("arm-daemon")
    daemon = start_daemon(arm_env, default_artifact, work / "data", work / "daemon.log")
    yield daemon
    code = daemon.stop()
    assert code == 0, f"emulated daemon did not stop cleanly ({code}):\n{daemon.log_text()[-3000:]}"


# The second artifact of the push test (and of bench/bench_arm.py): GPTQ INT4 block 64, built on
# this host like `edgellm quantize --model default --method gptq --bits 4 --block 64 --plan int4`.
GPTQ_B64 = ("--model", "default", "--method", "gptq", "--bits", "4", "--block", "64", "--plan", "int4")


@pytest.fixture(scope="session")
def second_artifact() -> Path:
    """$EDGELLM_ARM_SECOND_ARTIFACT, else .cache/artifacts/gptq-b64 (quantized here when missing, ~4 min)."""
    env = os.environ.get("EDGELLM_ARM_SECOND_ARTIFACT")
    path = Path(env) if env else REPO / ".cache" / "artifacts" / "gptq-b64"
    if not (path / "manifest.json").is_file():
        cmd = [sys.executable, "-m", "edgellm.cli", "quantize", *GPTQ_B64, "-o", str(path)]
        # Why one OpenMP thread: torch's GPTQ Hessian work with 2 threads on a 2-core machine that
        # also runs the emulated daemon oversubscribes it (55+ minutes seen); one thread takes ~3.
        subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return path
