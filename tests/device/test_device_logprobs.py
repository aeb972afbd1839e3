"""Logprobs on the real default model, over a real daemon's gRPC: the numbers are the engine's own.

Every reported logprob is checked against a direct computation: a second engine with the daemon's
settings runs the same tokens (prefill, then one-token decodes, as plain decoding does) and the
log-softmax of its logits is taken here. Prompt logprobs are checked against one all-positions
prefill of a runtime loaded with `all_logits` (the daemon switches it on per request).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio

from edgellm.client.aio import AioDaemon, connect
from edgellm.client.params import GenerateParams
from edgellm.common.channel import ChannelSecurity
from edgellm.device.logprobs import log_softmax
from edgellm.device.rpc.server import RunningDaemon
from edgellm.engine.mnn import MnnEngine
from edgellm.v1 import device_pb2
from tests.daemons import loopback_daemon

TOLERANCE = 1e-3  # the bar; float32 on the wire costs ~1e-6
CHAT = (("user", "What is the capital of France?"),)
TEXT = "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is"


@pytest_asyncio.fixture(scope="module")
async def daemon(
    default_artifact: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RunningDaemon]:
    """The real default model behind a daemon on port 0 (speculation on, as by default)."""
    async with loopback_daemon(default_artifact, tmp_path_factory.mktemp("d")) as running:
        yield running


@pytest.fixture(scope="module")
def engine(daemon: RunningDaemon) -> Iterator[MnnEngine]:
    """A second engine with exactly the daemon's settings, for the direct computation."""
    live = _live(daemon)
    twin = MnnEngine(live.artifact, live.config)
    twin.load()
    yield twin
    twin.close()


def _live(daemon: RunningDaemon) -> MnnEngine:
    loaded = daemon.core.models.loaded
    assert loaded is not None and isinstance(loaded.engine, MnnEngine)
    return loaded.engine


async def _generate(daemon: RunningDaemon, params: GenerateParams) -> list[device_pb2.GenerateResponse]:
    client: AioDaemon = connect(f"127.0.0.1:{daemon.port}", ChannelSecurity.insecure_loopback())
    try:
        return [msg async for msg in client.stub.Generate(params.to_proto())]
    finally:
        await client.channel.close()


def _tokens(responses: list[device_pb2.GenerateResponse]) -> tuple[list[int], list[device_pb2.TokenLogprob]]:
    ids = [t for r in responses for t in r.token_ids]
    scores = [lp for r in responses for lp in r.logprobs]
    return ids, scores


def _direct(engine: MnnEngine, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """log-softmax of plain decoding's logits before each of TOKENS (prefill, then decodes)."""
    engine.reset()
    logits = engine.prefill(prompt)
    out = []
    for token in tokens:
        out.append(log_softmax(logits))
        logits = engine.decode(token)
    engine.reset()
    return out


async def test_greedy_logprobs_are_the_engine_log_softmax_and_their_top_1_is_the_emitted_token(
    daemon: RunningDaemon, engine: MnnEngine
) -> None:
    params = GenerateParams(messages=CHAT, max_new_tokens=12, logprobs=True, top_logprobs=5)
    responses = await _generate(daemon, params)
    ids, scores = _tokens(responses)
    assert len(ids) == len(scores) > 0
    assert responses[-1].stats.draft_tokens == 0  # a logprobs request decodes plainly
    direct = _direct(engine, engine.encode(engine.apply_chat_template(CHAT)), ids)
    for token, score, logp in zip(ids, scores, direct, strict=True):
        assert score.token_id == token and score.token == engine.token_bytes(token)
        assert score.top[0].token_id == token  # greedy: the emitted token is the top-1
        assert abs(score.logprob - logp[token]) < TOLERANCE
        assert abs(score.top[0].logprob - logp.max()) < TOLERANCE
        assert [t.token_id for t in score.top] == list(np.argsort(-logp, kind="stable")[:5])


async def test_sampled_logprobs_are_of_the_logits_before_temperature(
    daemon: RunningDaemon, engine: MnnEngine
) -> None:
    params = GenerateParams(prompt=TEXT, max_new_tokens=10, temperature=0.8, seed=7, logprobs=True)
    ids, scores = _tokens(await _generate(daemon, params))
    direct = _direct(engine, engine.encode(TEXT), ids)
    for token, score, logp in zip(ids, scores, direct, strict=True):
        assert abs(score.logprob - logp[token]) < TOLERANCE
    assert all(not s.top for s in scores)  # top_logprobs 0: no alternatives


async def test_prompt_logprobs_are_the_teacher_forced_log_softmax_of_one_prefill(
    daemon: RunningDaemon, default_artifact: Path
) -> None:
    params = GenerateParams(prompt=TEXT, max_new_tokens=0, prompt_logprobs=True, top_logprobs=2)
    responses = await _generate(daemon, params)
    assert responses[-1].finish_reason == device_pb2.FINISH_REASON_LENGTH
    assert responses[-1].stats.completion_tokens == 0
    prompt = [lp for r in responses for lp in r.prompt_logprobs]
    live = _live(daemon)
    scorer = MnnEngine(live.artifact, replace(live.config, all_logits=True, draft_max=0))
    scorer.load()
    ids = scorer.encode(TEXT)
    rows = scorer.prefill_all(ids)
    scorer.close()
    assert [p.token_id for p in prompt] == ids
    assert not prompt[0].HasField("logprob") and not prompt[0].top
    for i in range(1, len(ids)):
        logp = log_softmax(rows[i - 1])
        assert abs(prompt[i].logprob - logp[ids[i]]) < TOLERANCE
        assert abs(prompt[i].top[0].logprob - logp.max()) < TOLERANCE


async def test_token_id_prompts_score_like_their_text(daemon: RunningDaemon, engine: MnnEngine) -> None:
    text = GenerateParams(prompt=TEXT, max_new_tokens=1, prompt_logprobs=True, logprobs=True)
    ids = GenerateParams(
        prompt_token_ids=tuple(engine.encode(TEXT)), max_new_tokens=1, prompt_logprobs=True, logprobs=True
    )
    a, b = await _generate(daemon, text), await _generate(daemon, ids)
    assert [lp.logprob for r in a for lp in r.prompt_logprobs] == [
        lp.logprob for r in b for lp in r.prompt_logprobs
    ]
    assert _tokens(a)[0] == _tokens(b)[0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs must be between 0 and 20"),
        ({"top_logprobs": 3}, "top_logprobs needs logprobs or prompt_logprobs"),
        ({"max_new_tokens": 0}, "0 only with prompt_logprobs"),
        ({"prompt_token_ids": (1, 2)}, "not both"),
        ({"prompt": "", "prompt_token_ids": (1, 10**6)}, "outside the vocabulary"),
    ],
)
async def test_bad_logprob_requests_are_invalid_arguments_that_say_what_to_change(
    daemon: RunningDaemon, change: dict[str, object], message: str
) -> None:
    params = GenerateParams.of(GenerateParams(prompt="Hi", max_new_tokens=2), **change)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _generate(daemon, params)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (err.value.details() or "")


async def test_a_long_prompt_s_logprobs_arrive_in_pieces_of_256(
    daemon: RunningDaemon, engine: MnnEngine
) -> None:
    ids = tuple(engine.encode("One two three four five six seven eight nine ten. " * 60))[:600]
    assert len(ids) == 600
    params = GenerateParams(prompt_token_ids=ids, max_new_tokens=0, prompt_logprobs=True)
    responses = await _generate(daemon, params)
    pieces = [len(r.prompt_logprobs) for r in responses if r.prompt_logprobs]
    assert pieces == [256, 256, 88]
    assert [lp.token_id for r in responses for lp in r.prompt_logprobs] == list(ids)
