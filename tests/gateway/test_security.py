"""The API key, and Host/Origin checks that keep web pages (DNS rebinding) from driving the gateway."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from edgellm.device.rpc.server import RunningDaemon
from edgellm.gateway.security import host_allowed
from edgellm.gateway.server import RunningGateway
from tests.gateway.conftest import KEY, StartGateway, keyed_http, sdk

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the capital of France?"}]


async def test_the_api_key_is_required_when_set(start_gw: StartGateway, fake_daemon: RunningDaemon) -> None:
    gw = await start_gw(fake_daemon, api_key="s3cret")
    async with sdk(gw, api_key="wrong") as c:
        with pytest.raises(openai.AuthenticationError) as caught:
            await c.chat.completions.create(model="fake-model", messages=QUESTION)
        assert caught.value.code == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            await c.models.list()
    async with sdk(gw, api_key="s3cret") as c:
        answer = await c.chat.completions.create(model="fake-model", messages=QUESTION, temperature=0)
        assert answer.choices[0].message.content
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.port}") as http:
        assert (await http.get("/health")).status_code == 200  # probes need no key
        assert (await http.get("/metrics")).status_code == 401
        ok = await http.get(
            "/metrics", headers={"Authorization": "bearer s3cret"}
        )  # scheme is case-insensitive
        assert ok.status_code == 200


async def test_a_foreign_host_header_is_refused(gateway: RunningGateway) -> None:
    port = gateway.port
    async with keyed_http(gateway) as http:
        refused = await http.get("/v1/models", headers={"Host": "evil.example:8080"})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "host_not_allowed"
        assert (await http.get("/v1/models", headers={"Host": f"localhost:{port}"})).status_code == 200


async def test_an_allowed_host_name_is_served(start_gw: StartGateway, fake_daemon: RunningDaemon) -> None:
    gw = await start_gw(fake_daemon, allowed_hosts=("phone.lan",))
    async with keyed_http(gw) as http:
        assert (await http.get("/v1/models", headers={"Host": "phone.lan:8080"})).status_code == 200


async def test_a_browser_origin_is_refused_unless_configured(
    start_gw: StartGateway, fake_daemon: RunningDaemon
) -> None:
    plain = await start_gw(fake_daemon)
    cors = await start_gw(fake_daemon, cors_origins=("http://localhost:3000",))
    body = {"model": "fake-model", "messages": QUESTION, "max_tokens": 2}
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as http:
        refused = await http.post(
            f"http://127.0.0.1:{plain.port}/v1/chat/completions",
            json=body,
            headers={"Origin": "http://evil.example"},
        )
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "origin_not_allowed"
        refused = await http.post(
            f"http://127.0.0.1:{plain.port}/v1/chat/completions",
            json=body,
            headers={"Origin": "http://localhost:3000"},
        )
        assert refused.status_code == 403  # CORS is off unless configured
        url = f"http://127.0.0.1:{cors.port}/v1/chat/completions"
        ok = await http.post(url, json=body, headers={"Origin": "http://localhost:3000"})
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "http://localhost:3000"
        preflight = await http.options(
            url, headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"}
        )
        assert preflight.status_code == 200


@pytest.mark.parametrize(
    ("host", "ok"),
    [("127.0.0.1:8080", True), ("[::1]:8080", True), ("localhost", True), ("192.168.1.5:8080", True),
     ("attacker.example", False), ("", False), ("localhost.attacker.example:8080", False)],
)  # fmt: skip
def test_host_names_are_allowed_only_as_ips_localhost_or_configured(host: str, ok: bool) -> None:
    assert host_allowed(host, ()) is ok
