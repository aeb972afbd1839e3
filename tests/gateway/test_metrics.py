"""/metrics on a fake-engine daemon: llama-server's names, and scrapes that never reach the sensors."""

from __future__ import annotations

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from edgellm.device.rpc.server import RunningDaemon
from edgellm.gateway.server import RunningGateway
from tests.gateway.conftest import StartGateway, gateway_of, keyed_http, sdk, telemetry_read


async def _scrape(http: httpx.AsyncClient, gw: RunningGateway) -> dict[str, float]:
    response = await http.get(f"http://127.0.0.1:{gw.port}/metrics")
    assert response.status_code == 200
    return {
        s.name + str(sorted(s.labels.items()) or ""): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


async def test_scrapes_read_the_cached_sample_not_the_device(
    start_gw: StartGateway, fake_daemon: RunningDaemon
) -> None:
    gw = await start_gw(fake_daemon, telemetry_period_s=60.0)
    watch = gateway_of(gw).watch
    await telemetry_read(gw)
    assert watch.samples == 1
    async with keyed_http(gw) as http:
        for _ in range(20):
            metrics = await _scrape(http, gw)
    assert watch.samples == 1  # twenty scrapes, still the one telemetry read
    assert metrics["edgellm_device_up"] == 1.0
    assert metrics["edgellm_daemon_rss_bytes"] > 0


async def test_llama_server_counters_grow_with_each_request(
    gateway: RunningGateway, client: openai.AsyncOpenAI
) -> None:
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]
    async with keyed_http(gateway) as http:
        before = await _scrape(http, gateway)
        answer = await client.chat.completions.create(
            model="fake-model", messages=messages, max_tokens=4, temperature=0
        )
        after = await _scrape(http, gateway)
    assert answer.usage is not None
    grown = after["llamacpp:tokens_predicted_total"] - before.get("llamacpp:tokens_predicted_total", 0)
    assert grown == answer.usage.completion_tokens == 4
    prompt = after["llamacpp:prompt_tokens_total"] - before.get("llamacpp:prompt_tokens_total", 0)
    assert prompt == answer.usage.prompt_tokens
    assert after["llamacpp:requests_processing"] == 0 and after["llamacpp:requests_deferred"] == 0
    ok = "edgellm_gateway_requests_total[('endpoint', 'chat'), ('status', '200')]"
    assert after[ok] - before.get(ok, 0) == 1


async def test_a_sdk_client_sees_metrics_protected_by_the_key(
    start_gw: StartGateway, fake_daemon: RunningDaemon
) -> None:
    gw = await start_gw(fake_daemon, api_key="k")
    async with sdk(gw, api_key="k") as c:
        await c.models.list()
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"http://127.0.0.1:{gw.port}/metrics")).status_code == 401
