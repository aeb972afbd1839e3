"""Memory soak: 1,000 sequential requests of mixed lengths must not grow RSS (run: make soak)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from edgellm.device.config import DaemonConfig
from edgellm.device.generation import GenerationJob
from edgellm.device.rpc.server import start_server
from edgellm.device.sampler import SamplingConfig

PROMPTS = [
    "Hi",
    "What is the capital of France?",
    "Write a short poem about the sea and the wind and the boats that sail on it at night.",
    "Explain, step by step, how a bicycle works, covering the frame, the wheels, the chain and the gears.",
]


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow
@pytest.mark.timeout(2400)  # ~7 min on an idle 2-core machine; much longer when it is shared
async def test_thousand_requests_leave_rss_flat(default_artifact: Path, tmp_path: Path) -> None:
    running = await start_server(
        DaemonConfig.of(
            port=0, model=default_artifact, data_dir=tmp_path, kv_window=256, insecure_loopback=True
        )
    )
    rng = random.Random(0)
    try:
        after_50 = 0
        for i in range(1000):
            session = f"s{rng.randrange(4)}" if rng.random() < 0.5 else ""
            job = GenerationJob(
                request_id=f"r{i}",
                prompt=None,
                messages=(("user", rng.choice(PROMPTS)),),
                max_new_tokens=rng.choice([1, 4, 16, 64]),
                sampling=SamplingConfig(temperature=rng.choice([0.0, 0.8]), seed=i),
                session_id=session,
            )
            async for _ in running.core.generate(job):
                pass
            if i == 49:
                after_50 = rss_kib()
            if (i + 1) % 100 == 0:
                print(f"soak: {i + 1} requests, RSS {rss_kib()} KiB (after 50: {after_50} KiB)")
        final = rss_kib()
    finally:
        await running.stop(0)
    assert final <= after_50 * 1.02, f"RSS grew from {after_50} KiB to {final} KiB"
