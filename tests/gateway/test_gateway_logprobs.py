"""Logprobs through the gateway on the real default model, with the official SDK over real sockets.

Each number is checked against a direct computation on a second engine with the daemon's
settings: chat logprobs against plain greedy decoding's log-softmax, and completions' echoed
prompt logprobs against one all-positions prefill (teacher forcing). Refusals run on the fake daemon.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from openai.types.chat import ChatCompletionMessageParam

from edgellm.device.logprobs import log_softmax
from edgellm.device.rpc.server import RunningDaemon
from edgellm.engine.mnn import MnnEngine
from tests.daemons import loopback_daemon
from tests.gateway.conftest import StartGateway, keyed_http, sdk
from tests.gateway.tool_schemas import WEATHER

TOLERANCE = 1e-3
QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the capital of France?"}]
PROMPTS = ["The capital of France is Paris.", "Water boils at one hundred degrees Celsius."]


@pytest_asyncio.fixture(scope="module")
async def real_daemon(
    default_artifact: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RunningDaemon]:
    """The real default model behind a daemon on port 0."""
    async with loopback_daemon(default_artifact, tmp_path_factory.mktemp("d")) as running:
        yield running


def _model(daemon: RunningDaemon) -> str:
    loaded = daemon.core.status().model
    assert loaded is not None
    return loaded.artifact.name


def _live(daemon: RunningDaemon) -> MnnEngine:
    loaded = daemon.core.models.loaded
    assert loaded is not None and isinstance(loaded.engine, MnnEngine)
    return loaded.engine


@pytest.fixture(scope="module")
def twin(real_daemon: RunningDaemon) -> Iterator[MnnEngine]:
    """A second engine with the daemon's settings (all_logits switched on per call, as the daemon does)."""
    live = _live(real_daemon)
    engine = MnnEngine(live.artifact, live.config)
    engine.load()
    yield engine
    engine.close()


def _greedy(engine: MnnEngine, prompt: list[int], steps: int) -> list[tuple[int, np.ndarray]]:
    """Plain greedy decoding: each chosen token and the log-softmax it was chosen from."""
    engine.reset()
    logits = engine.prefill(prompt)
    out = []
    for _ in range(steps):
        logp = log_softmax(logits)
        token = int(np.argmax(logp))
        out.append((token, logp))
        logits = engine.decode(token)
    engine.reset()
    return out


async def test_chat_logprobs_are_the_daemon_sampling_distribution(
    real_daemon: RunningDaemon, start_gw: StartGateway, twin: MnnEngine
) -> None:
    gw = await start_gw(real_daemon)
    async with sdk(gw) as client:
        # frequency_penalty 0: the model's own distribution (the bundled model's default is 0.7, and
        # logprobs are of the penalised logits the token was chosen from: docs/gateway.md).
        answer = await client.chat.completions.create(
            model=_model(real_daemon),
            messages=QUESTION,
            temperature=0,
            max_tokens=10,
            logprobs=True,
            top_logprobs=3,
            frequency_penalty=0,
        )
    assert answer.choices[0].logprobs is not None
    content = answer.choices[0].logprobs.content or []
    assert content and "".join(c.token for c in content) == answer.choices[0].message.content
    prompt = twin.encode(twin.apply_chat_template([("user", "What is the capital of France?")]))
    direct = _greedy(twin, prompt, len(content))
    for entry, (token, logp) in zip(content, direct, strict=True):
        assert entry.top_logprobs[0].token == entry.token  # greedy: the emitted token is the top-1
        assert bytes(entry.bytes or []) == twin.token_bytes(token)
        assert abs(entry.logprob - float(logp[token])) < TOLERANCE
        assert len(entry.top_logprobs) == 3


async def test_streamed_chat_logprobs_equal_the_whole_answer(
    real_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    gw = await start_gw(real_daemon)
    args: dict[str, Any] = {
        "model": _model(real_daemon), "messages": QUESTION, "temperature": 0, "max_tokens": 16,
        "logprobs": True, "top_logprobs": 2,
    }  # fmt: skip
    async with sdk(gw) as client:
        whole = await client.chat.completions.create(**args)
        streamed: list[Any] = []
        async for chunk in await client.chat.completions.create(**args, stream=True):
            if chunk.choices and chunk.choices[0].logprobs is not None:
                streamed.extend(chunk.choices[0].logprobs.content or [])
    assert whole.choices[0].logprobs is not None
    assert [e.model_dump() for e in streamed] == [
        e.model_dump() for e in whole.choices[0].logprobs.content or []
    ]


async def test_streamed_completion_logprobs_equal_the_whole_answer(
    real_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    gw = await start_gw(real_daemon)
    args: dict[str, Any] = {
        "model": _model(real_daemon), "prompt": "The capital of France is", "temperature": 0,
        "max_tokens": 12, "logprobs": 2,
    }  # fmt: skip
    async with sdk(gw) as client:
        whole = await client.completions.create(**args)
        lists: dict[str, list[Any]] = {
            "tokens": [],
            "token_logprobs": [],
            "top_logprobs": [],
            "text_offset": [],
        }
        async for chunk in await client.completions.create(**args, stream=True):
            if chunk.choices and chunk.choices[0].logprobs is not None:
                for key, values in lists.items():
                    values.extend(getattr(chunk.choices[0].logprobs, key) or [])
    assert whole.choices[0].logprobs is not None
    assert lists == {key: getattr(whole.choices[0].logprobs, key) for key in lists}
    assert whole.usage and len(lists["tokens"]) == whole.usage.completion_tokens


async def test_chat_logprobs_come_with_tool_calls_and_stream_the_same(
    real_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    """Every generated token's entry, the call's tokens included (as vLLM answers), streamed or not."""
    gw = await start_gw(real_daemon)
    args: dict[str, Any] = {
        "model": _model(real_daemon), "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER], "tool_choice": "required", "temperature": 0, "max_tokens": 60,
        "logprobs": True, "top_logprobs": 2,
    }  # fmt: skip
    async with sdk(gw) as client:
        whole = await client.chat.completions.create(**args)
        streamed: list[Any] = []
        calls: list[Any] = []
        async for chunk in await client.chat.completions.create(**args, stream=True):
            if chunk.choices and chunk.choices[0].logprobs is not None:
                streamed.extend(chunk.choices[0].logprobs.content or [])
            if chunk.choices and chunk.choices[0].delta.tool_calls:
                calls.extend(chunk.choices[0].delta.tool_calls)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls and calls
    assert choice.logprobs is not None and choice.logprobs.content
    assert whole.usage and len(choice.logprobs.content) == whole.usage.completion_tokens
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in choice.logprobs.content]


async def test_a_streamed_completion_with_echo_sends_the_prompt_first_and_equals_the_whole_answer(
    real_daemon: RunningDaemon, start_gw: StartGateway
) -> None:
    gw = await start_gw(real_daemon)
    prompt = "The capital of France is"
    args: dict[str, Any] = {
        "model": _model(real_daemon), "prompt": prompt, "temperature": 0, "max_tokens": 6,
        "logprobs": 1, "echo": True,
    }  # fmt: skip
    lists: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    async with sdk(gw) as client:
        whole = await client.completions.create(**args)
        texts = []
        async for chunk in await client.completions.create(**args, stream=True):
            if chunk.choices:
                texts.append(chunk.choices[0].text)
            if chunk.choices and chunk.choices[0].logprobs is not None:
                for key, values in lists.items():
                    values.extend(getattr(chunk.choices[0].logprobs, key) or [])
        plain = [
            c.choices[0].text
            async for c in await client.completions.create(**args | {"logprobs": None}, stream=True)
            if c.choices
        ]
    assert texts[0] == prompt and plain[0] == prompt  # the prompt, whole, is the first chunk
    assert "".join(texts) == "".join(plain) == whole.choices[0].text
    assert whole.choices[0].logprobs is not None
    assert lists == {key: getattr(whole.choices[0].logprobs, key) for key in lists}


async def test_completions_score_a_list_of_prompts_with_echo_like_a_teacher_forced_prefill(
    real_daemon: RunningDaemon, start_gw: StartGateway, twin: MnnEngine
) -> None:
    gw = await start_gw(real_daemon)
    async with sdk(gw) as client:
        scored = await client.completions.create(
            model=_model(real_daemon), prompt=PROMPTS, echo=True, logprobs=1, max_tokens=0
        )
    assert [c.index for c in scored.choices] == [0, 1]
    for choice, prompt in zip(scored.choices, PROMPTS, strict=True):
        assert choice.text == prompt and choice.logprobs is not None
        lp = choice.logprobs
        ids = twin.encode(prompt)
        rows = twin.prefill_all(ids)
        twin.reset()
        assert lp.token_logprobs is not None and lp.top_logprobs is not None and lp.tokens is not None
        assert len(lp.tokens) == len(ids) and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        for i in range(1, len(ids)):
            logp = log_softmax(rows[i - 1])
            assert abs(lp.token_logprobs[i] - float(logp[ids[i]])) < TOLERANCE
            assert abs(max(lp.top_logprobs[i].values()) - float(logp.max())) < TOLERANCE
        assert lp.text_offset == [
            len(prompt.encode()[: sum(map(len, map(twin.token_bytes, ids[:i])))].decode())
            for i in range(len(ids))
        ]


async def test_an_lm_eval_loglikelihood_request_scores_token_id_prompts(
    real_daemon: RunningDaemon, start_gw: StartGateway, twin: MnnEngine
) -> None:
    """What lm-evaluation-harness's local-completions sends: token ids, echo, logprobs 1, max_tokens 1."""
    gw = await start_gw(real_daemon)
    ids = [twin.encode(p) for p in PROMPTS]
    body = {
        "model": _model(real_daemon),
        "prompt": ids,
        "temperature": 0,
        "max_tokens": 1,
        "logprobs": 1,
        "seed": 1234,
        "echo": True,
    }
    async with keyed_http(gw) as http:
        reply = await http.post("/v1/completions", json=body)
    assert reply.status_code == 200, reply.text
    for choice, prompt in zip(reply.json()["choices"], ids, strict=True):
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == len(prompt) + 1  # the prompt, then one generated token
        # lm-eval's is_greedy: each continuation token's logprob against its position's best
        assert all(isinstance(top, dict) and len(top) == 1 for top in lp["top_logprobs"][1:])


@pytest.mark.parametrize(
    ("endpoint", "extra", "param"),
    [
        ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("chat", {"top_logprobs": 2}, "top_logprobs"),
        ("chat", {"logprobs": "yes"}, "logprobs"),
        ("completions", {"logprobs": 21}, "logprobs"),
        ("completions", {"logprobs": True}, "logprobs"),
        ("completions", {"echo": 1}, "echo"),
        ("completions", {"max_tokens": 0}, "max_tokens"),
        ("completions", {"logprobs": -1}, "logprobs"),
        ("completions", {"prompt": ["a", "b"], "stream": True}, "prompt"),
        ("completions", {"prompt": [[1, -2]]}, "prompt"),
        ("completions", {"prompt": []}, "prompt"),
    ],
)
async def test_bad_logprob_values_are_a_400_naming_the_param(
    start_gw: StartGateway, fake_daemon: RunningDaemon, endpoint: str, extra: dict[str, Any], param: str
) -> None:
    gw = await start_gw(fake_daemon)
    base: dict[str, Any] = {"model": "fake-model"}
    base |= {"messages": QUESTION} if endpoint == "chat" else {"prompt": "Hello"}
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    async with keyed_http(gw) as http:
        reply = await http.post(path, json=base | extra)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
