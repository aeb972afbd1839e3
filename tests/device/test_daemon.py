"""The real daemon over real gRPC with the real default model (the daemon's own logic runs on the
fake engine in tests/rpc; these check what only the model can show)."""

from __future__ import annotations

from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc

CAPITAL = [common_pb2.ChatMessage(role="user", content="What is the capital of France?")]


async def test_greedy_capital_streams_paris_with_stats(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    responses = [
        r async for r in daemon_stub.Generate(device_pb2.GenerateRequest(messages=CAPITAL, max_new_tokens=48))
    ]
    text = "".join(r.text for r in responses)
    assert "Paris" in text
    assert len(responses) > 2  # streamed, not one blob
    last = responses[-1]
    assert last.finish_reason in (device_pb2.FINISH_REASON_STOP, device_pb2.FINISH_REASON_LENGTH)
    assert all(not r.HasField("stats") for r in responses[:-1])
    s = last.stats
    ids = [t for r in responses for t in r.token_ids]
    assert s.completion_tokens == len(ids) > 0
    assert s.prompt_tokens > 10 and s.prefilled_tokens == s.prompt_tokens
    assert s.ttft_ms > 0 and s.prefill_tokens_per_second > 0 and s.decode_tokens_per_second > 0
    assert s.total_ms >= s.ttft_ms


async def test_status_reports_the_real_models_context_and_load(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    st = await daemon_stub.GetStatus(device_pb2.GetStatusRequest())
    assert st.HasField("model") and st.model.loaded
    assert len(st.model.artifact_id) == 64
    assert st.context_tokens == 8192 and st.threads >= 1 and st.load_ms > 0


async def test_utf8_split_characters_are_never_emitted_half(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    # Japanese text: most characters take several byte-level tokens in SmolLM2's vocabulary.
    request = device_pb2.GenerateRequest(prompt="日本の首都は東京です。日本の", max_new_tokens=24)
    responses = [r async for r in daemon_stub.Generate(request)]
    deltas = [r for r in responses if r.token_ids]
    text = "".join(r.text for r in responses)
    assert any(ord(ch) > 127 for ch in text)
    assert "\ufffd" not in text
    # Some token produced no text on its own: its character was completed by a later token.
    assert any(r.token_ids and not r.text for r in deltas)
