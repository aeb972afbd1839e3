"""What Termux differs in, run without the phone: its platform values, pkg's grpcio, no power_supply.

Termux's Python 3.13 reports sys.platform == "android" and finds no glibc; `pkg` ships grpcio
1.81.x; an unrooted app cannot read /sys/class/power_supply (DESIGN.md, Phone facts). The
emulated ARM run (make test-arm) runs this module under Debian's arm64 Python 3.13 with the
oldest grpcio pyproject allows.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grpc
import pytest

from edgellm.common.allocator import tune_for_streaming
from edgellm.device.telemetry.battery import BatteryReader
from edgellm.device.telemetry.source import TelemetrySource
from tests.emulation import needs_exec

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "edgellm"
SD8G3 = REPO / "tests" / "fixtures" / "sysfs" / "sd8gen3"
# Tests that are false on Termux's Python 3.13 ("android", "Android") though the kernel is Linux.
LINUX_GATE = re.compile(
    r"""sys\.platform\s*(==|!=)\s*['"]linux|sys\.platform\.startswith\(\s*['"]linux"""
    r"""|platform\.system\(\)\s*(==|!=)\s*['"]Linux"""
)
HOST_SIDE = ("torch", "transformers", "tqdm", "matplotlib", "llmexport", "onnx", "adbutils")


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def test_no_code_the_phone_runs_gates_on_linux() -> None:
    offenders = [
        f"{p.relative_to(REPO)}:{n}"
        for part in ("device", "common", "client", "v1", "cli.py")
        for p in ([SRC / part] if part.endswith(".py") else sorted((SRC / part).rglob("*.py")))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if LINUX_GATE.search(line)
    ]
    assert offenders == []


def test_device_code_under_termuxs_platform_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A fake of what the host lacks: Android's sys.platform and a C library that is not glibc."""
    monkeypatch.setattr(sys, "platform", "android")
    monkeypatch.setattr("platform.libc_ver", lambda *a, **k: ("", ""))  # bionic: no glibc marker
    assert tune_for_streaming() is False  # bionic's malloc is left alone
    reading = TelemetrySource(SD8G3, SD8G3).read()
    assert reading.skin_c is not None and len(reading.cores) == 8
    assert BatteryReader(command=(str(tmp_path / "termux-battery-status"),)).available is False


@needs_exec  # emulated, the environment also holds no host-side package to compare against
def test_the_daemon_command_imports_nothing_of_the_host_side() -> None:
    """`edgellm daemon` must start with the phone's packages: grpcio, protobuf, numpy, MNN, structlog."""
    code = (
        "import sys, edgellm.cli as c, edgellm.device.rpc.server\n"
        "c.build_parser().parse_args(['daemon', '--port', '0'])\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(out.split())
    assert loaded.isdisjoint(HOST_SIDE), sorted(loaded & set(HOST_SIDE))


def test_generated_stubs_accept_the_oldest_grpcio_pyproject_allows() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if re.match(r"grpcio\s*>=", d)]
    oldest = spec.split(">=")[1].split(",")[0].strip()
    for stub in sorted((SRC / "v1").glob("*_pb2_grpc.py")):
        m = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", stub.read_text())
        assert m is not None, stub
        assert _version(m.group(1)) <= _version(oldest), f"{stub.name} needs grpcio {m.group(1)}"
    assert _version(grpc.__version__) >= _version(oldest)
    from edgellm.v1 import device_pb2_grpc, host_pb2_grpc  # raise under a grpcio older than the generator

    assert callable(device_pb2_grpc.DeviceDaemonStub) and callable(host_pb2_grpc.HostServiceStub)


async def test_without_power_supply_the_battery_comes_from_termux_api(tmp_path: Path) -> None:
    assert not (SD8G3 / "sys" / "class" / "power_supply").exists()  # as on an unrooted phone
    fake = tmp_path / "termux-battery-status"  # Termux:API's command is a shell script too
    fake.write_text('#!/bin/sh\necho \'{"percentage": 64, "temperature": 29.5}\'\n')
    fake.chmod(0o755)
    battery = BatteryReader(command=(str(fake),), timeout_s=10.0)
    await battery.refresh()
    reading = TelemetrySource(SD8G3, SD8G3, battery).read()
    assert reading.battery_c == 29.5  # Termux:API first, the fixture's battery zone (33.0) second
    assert reading.control_c == reading.skin_c == pytest.approx(36.4)
