"""The daemon as Termux runs it: sys.platform == "android", no host-only packages, no MNN model."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter: sys.platform is patched before anything imports, and the host-only
# packages (and MNN, only needed once a model loads) are made unimportable, as on a phone. tqdm
# stays: install.sh installs the wheel with the `client` extra (tqdm, pure Python).
SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    sys.platform = "android"
    for name in ("torch", "transformers", "accelerate", "onnx", "onnxruntime", "gguf", "llmexport",
                 "adbutils", "MNN"):
        sys.modules[name] = None
    from edgellm.cli import build_parser
    from edgellm.device.cli import config_from
    from edgellm.device.rpc.server import start_server
    from edgellm.common.channel import ChannelSecurity, open_aio_channel
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    ns = build_parser().parse_args(["daemon", "--port", "0", "--data-dir", sys.argv[1]])
    async def main():
        running = await start_server(config_from(ns))
        # The daemon serves TLS (its self-signed certificate, made now): trust exactly that one.
        trust = ChannelSecurity(None, tls=running.client_tls())
        async with open_aio_channel(f"127.0.0.1:{running.port}", trust) as ch:
            r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        await running.stop(0)
        print("health", health_pb2.HealthCheckResponse.ServingStatus.Name(r.status))
    asyncio.run(main())
    """
)


def test_daemon_starts_on_android_without_host_packages(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "health NOT_SERVING" in r.stdout  # up, health on, waiting for a model


def test_no_code_gates_on_linux() -> None:
    """Termux's Python reports sys.platform == "android": nothing may require "linux"."""
    offenders = []
    for path in REPO.glob("*/**/*.py"):
        if any(part in (".venv", ".cache", "build", "tests") for part in path.relative_to(REPO).parts):
            continue
        text = path.read_text(errors="replace")
        for needle in ('sys.platform == "linux"', "sys.platform == 'linux'", 'platform.system() == "Linux"'):
            if needle in text:
                offenders.append(f"{path.relative_to(REPO)}: {needle}")
    assert offenders == []
