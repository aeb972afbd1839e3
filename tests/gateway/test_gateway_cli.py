"""`edgellm gateway` as a user runs it: a real process in front of a (fake-engine) daemon."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest
import pytest_asyncio

from edgellm.device.rpc.server import RunningDaemon
from tests.fakes.fake_engine import DEFAULT_REPLY

KEY = "phone-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_healthy(proc: subprocess.Popen[bytes], port: int) -> None:
    """Poll /health until the gateway process answers 200."""
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            try:
                if (await http.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert proc.poll() is None, "the gateway exited"
            await asyncio.sleep(0.05)
    raise AssertionError("the gateway never answered /health")


@pytest_asyncio.fixture
async def gateway_process(fake_daemon: RunningDaemon) -> AsyncIterator[int]:
    """`edgellm gateway --target … --port P` with an API key from the environment; yields P."""
    port = _free_port()
    env = {**os.environ, "EDGELLM_GATEWAY_API_KEY": KEY}
    # --insecure-loopback: the fake daemon serves plaintext without a token (tests/rpc/conftest.py).
    argv = [sys.executable, "-m", "edgellm", "gateway", "--target", f"127.0.0.1:{fake_daemon.port}"]
    argv.append("--insecure-loopback")
    proc = subprocess.Popen([*argv, "--port", str(port)], env=env)  # noqa: ASYNC220
    try:
        await _wait_healthy(proc, port)
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


async def test_default_flags_make_a_key_answer_401_without_it_and_serve_the_sdk_with_it(
    fake_daemon: RunningDaemon, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    env = {k: v for k, v in os.environ.items() if k != "EDGELLM_GATEWAY_API_KEY"}
    env["EDGELLM_CONFIG_DIR"] = str(config)
    port = _free_port()
    # --insecure-loopback: the fake daemon serves plaintext without a token (tests/rpc/conftest.py).
    argv = [sys.executable, "-m", "edgellm", "gateway", "--target", f"127.0.0.1:{fake_daemon.port}"]
    argv.append("--insecure-loopback")
    with (tmp_path / "stderr").open("w") as err:
        proc = subprocess.Popen([*argv, "--port", str(port)], env=env, stderr=err)  # noqa: ASYNC220
        try:
            await _wait_healthy(proc, port)
            key_file = config / "gateway-key"
            key = key_file.read_text().strip()
            assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and len(key) >= 43
            async with httpx.AsyncClient() as http:
                refused = await http.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json={"messages": [{"role": "user", "content": "hi"}]},
                )
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
            assert refused.json()["error"]["code"] == "invalid_api_key"
            base = f"http://127.0.0.1:{port}/v1"
            async with openai.AsyncOpenAI(base_url=base, api_key="wrong", max_retries=0) as client:
                with pytest.raises(openai.AuthenticationError):
                    await client.models.list()
            async with openai.AsyncOpenAI(base_url=base, api_key=key, max_retries=0) as client:
                answer = await client.chat.completions.create(
                    model="fake-model", messages=[{"role": "user", "content": "Capital?"}], temperature=0
                )
            assert answer.choices[0].message.content == DEFAULT_REPLY
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    said = (tmp_path / "stderr").read_text()
    assert str(key_file) in said and key not in said  # where the key is, never the key


def _refusal(*args: str, env: dict[str, str] | None = None) -> str:
    """Run `edgellm gateway ARGS` expecting exit 2; return its stderr."""
    base = {k: v for k, v in os.environ.items() if k != "EDGELLM_GATEWAY_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "edgellm", "gateway", "--port", "1", *args],
        env={**base, **(env or {})}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    return done.stderr


def test_the_gateway_command_refuses_cleartext_off_loopback_and_no_key_off_loopback(tmp_path: Path) -> None:
    said = _refusal("--host", "0.0.0.0")
    assert "plain HTTP" in said and "--tls-cert and --tls-key, or --tls-self-signed" in said
    said = _refusal("--host", "0.0.0.0", "--no-api-key", "--tls-self-signed")
    assert "--no-api-key is for 127.0.0.1 only" in said
    loose = tmp_path / "key.txt"
    loose.write_text("k\n")
    loose.chmod(0o644)
    assert "chmod 600" in _refusal("--api-key-file", str(loose))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    empty.chmod(0o600)
    assert "is empty" in _refusal("--api-key-file", str(empty))


def test_the_fleet_flags_reach_the_config_and_a_bad_device_label_is_refused() -> None:
    from edgellm.cli import build_parser
    from edgellm.gateway.cli import config_from

    ns = build_parser().parse_args(
        ["gateway", "--no-api-key", "--device", "phone-1", "--no-shed-when-hot", "--hot-retry-after", "5"]
    )
    config = config_from(ns)
    assert config.device == "phone-1"
    assert not config.shedding.when_hot and config.shedding.hot_retry_after_s == 5
    assert config_from(build_parser().parse_args(["gateway", "--no-api-key"])).shedding.when_hot
    assert "--device 'phone 1'" in _refusal("--no-api-key", "--device", "phone 1")
