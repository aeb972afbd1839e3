"""Every family end to end (issue 28, Prove-it): convert -> gate -> GPTQ -> push -> Generate -> gateway.

Per family, on a tiny random-weight checkpoint with the family's own chat template
(tests/families/conftest.py builds it once per session):

- `edgellm convert`'s default preset passes the conversion gate (fidelity against the torch
  quantized model, perplexity against torch fp), and so does a GPTQ INT4 build;
- the GPTQ artifact is pushed to a real daemon (real MNN engine) with `edgellm push`, loaded, and
  answers Generate over gRPC;
- the device's prompt ids for system + user + assistant + user equal transformers'
  `apply_chat_template(..., add_generation_prompt=True)` (a family whose template has no system
  role is refused with INVALID_ARGUMENT, and the conversation without it is compared);
- a chat completion through the real OpenAI gateway (official SDK) counts the same prompt tokens.

Cost: two exports and two gates per family; all nine run in `make test` (361 s of CPU together,
28 s for phi3 alone on a quiet 2-core box; docs/models.md).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from edgellm.cli import main
from edgellm.common.channel import ChannelSecurity
from edgellm.device.rpc.server import RunningDaemon
from edgellm.host.convert.chat_template import CONVERSATIONS, reference_ids
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc
from tests.families.conftest import FamilyBuild, family_build
from tests.tiny_families import FAMILIES, chat_tokenizer, tiny_config

CASES = sorted(FAMILIES)
FULL = CONVERSATIONS[2]  # system + user + assistant + user
NO_SYSTEM = FULL[1:]  # user + assistant + user, for a template that refuses a system message
NEW_TOKENS = 8


@pytest.fixture
def build(family: str, tmp_path_factory: pytest.TempPathFactory) -> FamilyBuild:
    """FAMILY's tiny checkpoint and its two gated artifacts (built once per session)."""
    built = family_build(family, tmp_path_factory)
    print(f"{family}: seconds {built.seconds}")
    return built


@pytest.mark.parametrize("family", CASES)
def test_convert_and_gptq_pass_the_gate(build: FamilyBuild) -> None:
    for step, manifest in build.manifests.items():
        checks = manifest.checks
        assert checks is not None and checks.fidelity_decode is not None, step
        print(f"{build.family} {step}: {checks.fidelity_decode}")  # the gate raised if out of limits
        assert manifest.model.architecture == tiny_config(build.family).model_type  # llama3 is a llama


@pytest.mark.parametrize("family", CASES)
async def test_the_gptq_artifact_serves_generate_and_the_gateway_with_transformers_prompt_ids(
    build: FamilyBuild, daemon: RunningDaemon
) -> None:
    target = f"127.0.0.1:{daemon.port}"
    push = ["push", str(build.gptq), "--target", target, "--insecure-loopback"]
    assert await asyncio.to_thread(main, push) == 0
    [artifact] = daemon.core.store.installed()
    tokenizer = chat_tokenizer(build.family)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        await stub.LoadModel(device_pb2.LoadModelRequest(model=artifact.artifact_id))
        messages = await _conversation(stub, build.manifests["gptq"].tokenizer.system_role)
        tokens, prompt_tokens = await _generate(stub, messages)
    want = reference_ids(tokenizer, messages)
    assert tokens and prompt_tokens == len(want)
    loaded = daemon.core.models.loaded
    assert loaded is not None  # the daemon's own engine renders exactly transformers' ids
    assert loaded.engine.encode(loaded.engine.apply_chat_template(messages)) == want
    assert await _gateway_prompt_tokens(daemon, messages) == len(want)


async def _conversation(
    stub: device_pb2_grpc.DeviceDaemonAsyncStub, system_role: str | None
) -> tuple[tuple[str, str], ...]:
    """System + user + assistant + user, or without the system turn where the template refuses one."""
    if system_role != "refuse":
        return FULL
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _generate(stub, FULL)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "system" in str(err.value.details())
    return NO_SYSTEM


async def _generate(
    stub: device_pb2_grpc.DeviceDaemonAsyncStub, messages: tuple[tuple[str, str], ...]
) -> tuple[list[int], int]:
    """Greedy Generate over gRPC: (the new token ids, the prompt token count)."""
    request = device_pb2.GenerateRequest(
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in messages],
        max_new_tokens=NEW_TOKENS,
        sampling=device_pb2.SamplingParams(temperature=0.0),
    )
    tokens: list[int] = []
    prompt_tokens = 0
    async for response in stub.Generate(request):
        tokens.extend(response.token_ids)
        if response.HasField("stats"):
            prompt_tokens = response.stats.prompt_tokens
    return tokens, prompt_tokens


async def _gateway_prompt_tokens(daemon: RunningDaemon, messages: tuple[tuple[str, str], ...]) -> int:
    """A chat completion through the real gateway and the openai SDK: its prompt token count."""
    from edgellm.client.aio import connect
    from edgellm.gateway.config import GatewayConfig
    from edgellm.gateway.server import start_gateway
    from tests.gateway.conftest import KEY, sdk

    config = GatewayConfig(target=f"127.0.0.1:{daemon.port}", port=0, api_key=KEY, telemetry_period_s=0.2)
    gateway = await start_gateway(config, connect(config.target, ChannelSecurity.insecure_loopback()))
    try:
        async with sdk(gateway) as client:
            reply = await client.chat.completions.create(
                model="",
                messages=[{"role": r, "content": c} for r, c in messages],  # type: ignore[misc]
                temperature=0,
                max_tokens=NEW_TOKENS,
            )
    finally:
        await gateway.stop()
    usage = reply.usage
    assert usage is not None and usage.completion_tokens > 0 and reply.choices[0].message.content is not None
    return usage.prompt_tokens
