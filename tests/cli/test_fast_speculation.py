"""`fast` speculation end to end on the real default model: over gRPC, through `edgellm generate
--speculation fast`, and through the gateway with the openai SDK's `extra_body`.

A greedy request asking the model to repeat a passage is where prompt-lookup drafts pay: in `fast`
they are verified from the first token and taken as they are (docs/speculation.md), so the answer's
stats show accepted drafts and no re-decoded token; `off` drafts nothing. The daemon's drafted-token
counters show what each request did where the answer carries no stats (the OpenAI shape).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from edgellm.cli import main
from edgellm.client.aio import connect
from edgellm.common.channel import ChannelSecurity
from edgellm.device.rpc.server import RunningDaemon
from edgellm.gateway.config import GatewayConfig
from edgellm.gateway.server import start_gateway
from edgellm.v1 import common_pb2, device_pb2

PROMPTS = Path(__file__).parents[2] / "bench" / "prompts" / "spec_grounded.jsonl"
PROMPT = json.loads(PROMPTS.read_text().splitlines()[0])["prompt"]  # "Repeat the following passage..."
N = 48
Stub = Any  # the aio stub's calls are awaitable (the generated stubs type the sync API)


def request(speculation: device_pb2.Speculation.ValueType) -> device_pb2.GenerateRequest:
    return device_pb2.GenerateRequest(
        messages=[common_pb2.ChatMessage(role="user", content=PROMPT)],
        max_new_tokens=N,
        sampling=device_pb2.SamplingParams(temperature=0.0),
        speculation=speculation,
    )


async def answer(
    stub: Stub, speculation: device_pb2.Speculation.ValueType
) -> tuple[str, device_pb2.GenerateStats]:
    replies = [r async for r in stub.Generate(request(speculation))]
    return "".join(r.text for r in replies), replies[-1].stats


async def drafted(stub: Stub) -> tuple[int, int]:
    """The daemon's (drafted, accepted) token counters since its start."""
    st = await stub.GetStatus(device_pb2.GetStatusRequest())
    return int(st.draft_tokens_total), int(st.accepted_draft_tokens_total)


async def test_fast_over_grpc_drafts_from_the_first_token_and_repairs_nothing(daemon_stub: Stub) -> None:
    text, stats = await answer(daemon_stub, device_pb2.SPECULATION_FAST)
    assert stats.completion_tokens > 0 and text
    assert stats.accepted_draft_tokens > 0 and stats.repaired_tokens == 0, stats
    _, off = await answer(daemon_stub, device_pb2.SPECULATION_OFF)
    assert off.draft_tokens == 0


async def test_edgellm_generate_speculation_fast_reaches_the_daemon(
    daemon: RunningDaemon, daemon_stub: Stub, capsys: pytest.CaptureFixture[str]
) -> None:
    expected, _ = await answer(daemon_stub, device_pb2.SPECULATION_FAST)
    before = await drafted(daemon_stub)
    argv = ["generate", "--target", f"127.0.0.1:{daemon.port}", "--chat", "--temperature", "0"]
    # The gRPC request's plain greedy settings (the CLI otherwise sends its chat defaults).
    argv += [
        "--frequency-penalty",
        "0",
        "--top-p",
        "1",
        "--max-new-tokens",
        str(N),
        "--speculation",
        "fast",
        PROMPT,
    ]
    capsys.readouterr()
    # In a thread: the session daemon serves on this event loop.
    assert await asyncio.get_running_loop().run_in_executor(None, main, argv) == 0
    out, err = capsys.readouterr()
    after = await drafted(daemon_stub)
    assert out.strip() == expected.strip()  # the same request as over gRPC: the same greedy answer
    assert " accepted" in err and "re-decoded" not in err, err  # the summary line: drafts, no repair
    assert after[1] > before[1]


async def test_the_gateway_passes_speculation_fast_from_the_openai_sdks_extra_body(
    daemon: RunningDaemon, daemon_stub: Stub
) -> None:
    target = f"127.0.0.1:{daemon.port}"
    config = GatewayConfig(port=0, target=target, no_api_key=True)  # the loopback opt-out: no key here
    gw = await start_gateway(config, connect(target, ChannelSecurity(daemon.token, tls=daemon.client_tls())))
    try:
        async with openai.AsyncOpenAI(base_url=gw.url, api_key="none", max_retries=0, timeout=120) as sdk:
            model = (await sdk.models.list()).data[0].id  # the loaded model's name

            async def ask(speculation: str) -> tuple[str, tuple[int, int]]:
                before = await drafted(daemon_stub)
                reply = await sdk.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": PROMPT}],
                    temperature=0,
                    max_tokens=N,
                    extra_body={"speculation": speculation},
                )
                after = await drafted(daemon_stub)
                return reply.choices[0].message.content or "", (after[0] - before[0], after[1] - before[1])

            fast, fast_drafts = await ask("fast")
            _, off_drafts = await ask("off")
    finally:
        await gw.stop()
    assert fast_drafts[1] > 0 and off_drafts == (0, 0)
    assert fast.startswith("The Riley Center")  # the passage, repeated (the gateway's own sampling defaults)
