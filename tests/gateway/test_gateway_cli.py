"""`edgellm gateway` as a user runs it: a real process in front of a (fake-engine) daemon."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import httpx
import openai
import pytest_asyncio

from edgellm.device.rpc.server import RunningDaemon
from tests.fakes.fake_engine import DEFAULT_REPLY

KEY = "phone-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest_asyncio.fixture
async def gateway_process(fake_daemon: RunningDaemon) -> AsyncIterator[int]:
    """`edgellm gateway --target … --port P` with an API key from the environment; yields P."""
    port = _free_port()
    env = {**os.environ, "EDGELLM_GATEWAY_API_KEY": KEY}
    argv = [sys.executable, "-m", "edgellm", "gateway", "--target", f"127.0.0.1:{fake_daemon.port}"]
    proc = subprocess.Popen([*argv, "--port", str(port)], env=env)  # noqa: ASYNC220
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(300):
                try:
                    if (await http.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None, "the gateway exited"
                await asyncio.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_the_gateway_command_serves_the_sdk_with_its_api_key(gateway_process: int) -> None:
    base = f"http://127.0.0.1:{gateway_process}/v1"
    async with openai.AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "Capital of France?"}],
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == DEFAULT_REPLY
    assert chunks[-1].usage is not None


def test_the_gateway_command_refuses_a_public_address_without_a_key() -> None:
    env = {k: v for k, v in os.environ.items() if k != "EDGELLM_GATEWAY_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "edgellm", "gateway", "--host", "0.0.0.0", "--port", "1"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "without an API key" in done.stderr
