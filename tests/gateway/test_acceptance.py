"""Acceptance on the real model: `edgellm gateway` + the openai SDK, and /metrics as Prometheus reads it.

The daemon runs the real default artifact on a virtual phone (the host has no phone sysfs: the
virtual phone writes a calibrated fake one that the daemon's real readers read).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from edgellm.device.rpc.server import RunningDaemon
from edgellm.gateway.server import RunningGateway
from tests.daemons import loopback_daemon
from tests.gateway.conftest import StartGateway, keyed_http, sdk

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the capital of France?"}]


@pytest_asyncio.fixture
async def phone_daemon(default_artifact: Path, tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    """The real model on a virtual phone (temperatures, clusters and clocks to report)."""
    async with loopback_daemon(default_artifact, tmp_path, virtual_phone="sd8gen3") as running:
        yield running


async def _scrape(gw: RunningGateway) -> dict[str, list[tuple[dict[str, str], float]]]:
    async with keyed_http(gw) as http:
        response = await http.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


async def test_a_streamed_chat_about_france_says_paris_and_the_next_turn_is_cached(
    phone_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    gw = await start_gw(phone_daemon)
    loaded = phone_daemon.core.status().model
    assert loaded is not None
    model = loaded.artifact.name
    async with sdk(gw) as client:
        stream = await client.chat.completions.create(
            model=model,
            messages=QUESTION,
            temperature=0,
            max_tokens=48,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
        answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert "Paris" in answer
        usage = chunks[-1].usage
        assert usage is not None and usage.completion_tokens > 0 and usage.prompt_tokens > 0
        second = await client.chat.completions.create(
            model="",
            messages=[
                *QUESTION,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "And Italy?"},
            ],
            temperature=0,
            max_tokens=16,
        )
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert (second.usage.prompt_tokens_details.cached_tokens or 0) >= usage.prompt_tokens


async def test_metrics_are_prometheus_text_with_device_gauges_and_growing_token_counters(
    phone_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    gw = await start_gw(phone_daemon)
    async with sdk(gw) as client:
        await client.chat.completions.create(model="", messages=QUESTION, temperature=0, max_tokens=8)
        before = await _scrape(gw)
        await client.chat.completions.create(model="", messages=QUESTION, temperature=0, max_tokens=8)
    after = await _scrape(gw)
    temps = dict((labels["sensor"], v) for labels, v in after["edgellm_device_temperature_celsius"])
    assert 15 < temps["skin"] < 80 and "soc" in temps
    clocks = [v for _, v in after["edgellm_device_cluster_frequency_hertz"]]
    assert clocks and max(clocks) > 1e8
    assert after["edgellm_daemon_rss_bytes"][0][1] > 50e6
    assert "edgellm_governor_level" in after and after["edgellm_device_up"][0][1] == 1.0
    for counter in (
        "llamacpp:tokens_predicted_total",
        "llamacpp:prompt_tokens_total",
        "edgellm_gateway_requests_total",
    ):
        assert sum(v for _, v in after[counter]) > sum(v for _, v in before[counter]), counter
    # Why a wait: device gauges come from the gateway's telemetry sample, refreshed every period,
    # so the first scrape can show a sample from before the request ended; it read 0 once in a
    # fresh-clone `make test` (cause not pinned down further).
    deadline = time.monotonic() + 10
    while after["llamacpp:kv_cache_tokens"][0][1] == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        after = await _scrape(gw)
    assert after["llamacpp:kv_cache_tokens"][0][1] > 0


async def test_models_lists_the_real_artifact(phone_daemon: RunningDaemon, start_gw: StartGateway) -> None:
    gw = await start_gw(phone_daemon)
    async with sdk(gw) as client:
        models = [m async for m in client.models.list()]
    loaded = [m for m in models if m.model_extra and m.model_extra.get("loaded")]
    assert len(loaded) == 1 and loaded[0].id and loaded[0].owned_by == "edgellm"
