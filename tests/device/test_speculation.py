"""Speculative decoding on the fake engine: drafting, the draft policy, the loop and the acceptance rule.

The real-model checks (greedy identity, acceptance rule on real logits) are in
tests/device/test_speculation_model.py; the long distribution run is bench/bench_spec_distribution.py.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from edgellm.common.chi2 import goodness_of_fit, two_sample
from edgellm.device.constrain import Constraint, ConstraintKind, TokenGuide
from edgellm.device.constrain.library import TokenizerCache
from edgellm.device.decoding import Speculation, TokenLoop
from edgellm.device.drafting import LONG_MATCH, DraftPolicy, NgramDrafter
from edgellm.device.generation import Delta, Event, Finished, GenerationJob, run_generation
from edgellm.device.rpc.wire import job_from
from edgellm.device.sampler import Sampler, SamplingConfig
from edgellm.engine.artifact import open_artifact
from edgellm.engine.config import EngineConfig
from edgellm.engine.costs import PRIOR_DRAFT_COSTS, DraftCosts, ForwardCosts
from edgellm.engine.kv_cache import FeedStats, KvCache
from edgellm.engine.kv_window import WindowPolicy
from edgellm.v1 import device_pb2
from tests.fakes.fake_artifact import write_fake_artifact
from tests.fakes.fake_engine import FakeEngine

REPLY = " The river of the sea is the river of France."
COSTS = ForwardCosts.fixed({1: 0.010})  # verifies priced by the prior (+15% a drafted token)


@pytest.fixture
def fake_engine(tmp_path: Path) -> FakeEngine:
    engine = FakeEngine(open_artifact(write_fake_artifact(tmp_path)), EngineConfig(draft_max=8), reply=REPLY)
    engine.load()
    return engine


def generate(
    engine: FakeEngine, prompt: str, spec: Speculation, sampling: SamplingConfig | None = None, n: int = 40
) -> tuple[list[int], Finished]:
    tokens: list[int] = []

    def emit(event: Event) -> None:
        if isinstance(event, Delta):
            tokens.extend(event.token_ids)

    job = GenerationJob("t", None, (("user", prompt),), n, sampling or SamplingConfig(), speculation=spec)
    return tokens, run_generation(KvCache(engine, WindowPolicy(), costs=COSTS), job, emit, threading.Event())


def test_drafter_proposes_what_followed_the_longest_matching_suffix() -> None:
    drafter = NgramDrafter([5, 6, 7, 8, 9, 1, 6, 7, 3, 4])
    drafter.extend([6, 7])
    assert drafter.draft(3) == ([3, 4, 6], 2)  # "6 7" last followed by 3 4 (then the new 6)
    assert NgramDrafter([1, 2, 3]).draft(4) == ([], 0)


PRICES = DraftCosts(((1, 1.0), (2, 1.1), (3, 1.2), (5, 1.5), (9, 2.4)))


def test_policy_drafts_when_acceptance_is_high_and_stops_when_it_is_low() -> None:
    policy = DraftPolicy(PRICES, draft_max=8, acceptance=0.9)
    assert policy.choose(8) == 4  # 4.1 tokens per 1.5 steps beats 6.1 per 2.4
    for _ in range(20):
        policy.observe(4, 0)
    policy.waiting = 0
    assert policy.choose(8) == 0  # a plain step is faster than any draft that keeps failing


def test_policy_backs_off_after_failed_drafts_unless_the_reply_copies_a_long_match() -> None:
    policy = DraftPolicy(PRICES, draft_max=8, acceptance=0.9)
    policy.observe(4, 0)  # nothing accepted: 2 plain steps
    assert [policy.choose(8) > 0 for _ in range(3)] == [False, False, True]
    policy.observe(4, 0)  # again: twice as long
    assert [policy.choose(8, match=2) for _ in range(4)] == [0, 0, 0, 0]
    assert policy.choose(8, match=LONG_MATCH) > 0  # a long match is tried during a back-off
    policy.observe(4, 1)  # something accepted: no back-off
    assert policy.waiting == 0 and policy.choose(8) > 0


def test_draft_lengths_follow_the_engines_fixed_prices_not_the_timings(fake_engine: FakeEngine) -> None:
    """The same request drafts the same whatever the load-time timings said (the answer on the
    real model: tests/device/test_speculation_restart.py)."""
    job = GenerationJob(
        "t", None, (("user", "Repeat:" + REPLY),), 40, SamplingConfig(), speculation=Speculation.FAST
    )
    runs = []
    for seconds in ({1: 0.01, 2: 0.5, 3: 0.5, 5: 0.5, 9: 0.5}, {1: 0.5, 2: 0.01, 3: 0.01, 5: 0.01, 9: 0.01}):
        events: list[Event] = []
        cache = KvCache(fake_engine, WindowPolicy(), costs=ForwardCosts.fixed(seconds))
        done = run_generation(cache, job, events.append, threading.Event())
        runs.append(
            ([t for e in events if isinstance(e, Delta) for t in e.token_ids], done.stats.draft_tokens)
        )
    assert runs[0] == runs[1] and runs[0][1] > 0


def test_greedy_output_is_the_same_with_and_without_speculation(fake_engine: FakeEngine) -> None:
    prompt = "Repeat:" + REPLY
    plain, plain_done = generate(fake_engine, prompt, Speculation.OFF)
    spec, spec_done = generate(fake_engine, prompt, Speculation.AUTO)
    assert spec == plain
    assert spec_done.reason == plain_done.reason
    assert spec_done.stats.accepted_draft_tokens > 0
    assert plain_done.stats.draft_tokens == 0


LONG_REPLY = REPLY * 4  # greedy drafts start after CONFIDENT_RUN confident tokens


def tie_engine(tmp_path: Path, ties: set[int], cls: type[FakeEngine] = FakeEngine) -> FakeEngine:
    """A fake engine replying LONG_REPLY whose batched rows flip the near-ties at these steps."""
    engine = cls(
        open_artifact(write_fake_artifact(tmp_path)),
        EngineConfig(draft_max=8),
        reply=LONG_REPLY,
        near_ties=frozenset(ties),
    )
    engine.load()
    return engine


def session_turn(engine: FakeEngine, spec: Speculation) -> KvCache:
    """One 40-token turn of session "s" asking to repeat LONG_REPLY; the cache it leaves."""
    cache = KvCache(engine, WindowPolicy(), costs=COSTS)
    messages = (("user", "Repeat:" + LONG_REPLY),)
    turn = GenerationJob("t", None, messages, 40, SamplingConfig(), session_id="s", speculation=spec)
    run_generation(cache, turn, lambda _: None, threading.Event())
    return cache


class _UngatedFake(FakeEngine):
    """Claims exact batches while its near-ties still flip: speculation without the gate."""

    @property
    def logit_tolerance(self) -> float:
        return 0.0


@pytest.mark.parametrize("gated", [True, False])
def test_near_ties_that_batching_flips_are_recomputed_one_at_a_time(tmp_path: Path, gated: bool) -> None:
    """MNN's batched logits differ slightly from one-token decodes (emulated: the runner-up wins at a
    near-tie once a verified token is cached). Gated, greedy speculation stays token-identical by
    re-decoding the verified tail where a choice is too close to call; ungated, it drifts."""
    engine = tie_engine(tmp_path, {30, 38}, FakeEngine if gated else _UngatedFake)
    prompt = "Repeat:" + LONG_REPLY
    plain, _ = generate(engine, prompt, Speculation.OFF, n=50)
    spec, done = generate(engine, prompt, Speculation.AUTO, n=50)
    assert done.stats.accepted_draft_tokens > 0
    if gated:
        assert spec == plain
        assert done.stats.repaired_tokens > 0
    else:
        assert spec != plain


def test_fast_drafts_greedy_requests_at_once_and_never_re_decodes(tmp_path: Path) -> None:
    """FAST takes greedy choices on the batched logits: no confident run to wait for, no repair,
    and so a near-tie that batching flips changes the answer (the price named in the proto)."""
    engine = tie_engine(tmp_path, {30, 38})
    prompt = "Repeat:" + LONG_REPLY
    plain, _ = generate(engine, prompt, Speculation.OFF, n=50)
    auto, auto_done = generate(engine, prompt, Speculation.AUTO, n=50)
    fast, fast_done = generate(engine, prompt, Speculation.FAST, n=50)
    assert auto == plain and auto_done.stats.repaired_tokens > 0
    assert fast != plain and fast_done.stats.repaired_tokens == 0
    assert fast_done.stats.accepted_draft_tokens > auto_done.stats.accepted_draft_tokens


def test_fast_is_token_identical_where_batched_logits_are_exact(fake_engine: FakeEngine) -> None:
    prompt = "Repeat:" + REPLY
    plain, _ = generate(fake_engine, prompt, Speculation.OFF)
    fast, done = generate(fake_engine, prompt, Speculation.FAST)
    assert fast == plain and done.stats.accepted_draft_tokens > 0


def test_a_fast_session_turn_reuses_an_inexact_cache_without_repairing_it(tmp_path: Path) -> None:
    engine = tie_engine(tmp_path, {90})  # a near-tie beyond the turn makes the engine's batches inexact
    cache = session_turn(engine, Speculation.FAST)
    assert not cache.exact
    history = list(engine.history)
    assert cache.begin("s", [*history, 5], FeedStats(), exact=False) == [5]
    assert not cache.exact and cache.repaired == 0 and engine.history == history


def test_a_session_turn_after_a_speculative_turn_starts_from_plain_decodings_cache(tmp_path: Path) -> None:
    """The next turn of a session reuses the cache; tokens a verify left there are re-decoded first."""
    engine = tie_engine(tmp_path, {60})
    cache = session_turn(engine, Speculation.AUTO)
    assert not cache.exact
    cache.begin("s", [*engine.history, 5], FeedStats())
    assert cache.exact and cache.repaired > 0


def test_a_stop_inside_a_draft_leaves_the_cache_as_plain_decoding_would(fake_engine: FakeEngine) -> None:
    prompt = "Repeat:" + REPLY + "<|im_end|>"  # the draft runs into the end of turn
    generate(fake_engine, prompt, Speculation.OFF)
    plain_history = list(fake_engine.history)
    generate(fake_engine, prompt, Speculation.AUTO)
    assert fake_engine.history == plain_history


def test_max_new_tokens_is_respected_inside_a_draft(fake_engine: FakeEngine) -> None:
    tokens, done = generate(fake_engine, "Repeat:" + REPLY, Speculation.AUTO, n=5)
    assert len(tokens) == 5 and done.stats.completion_tokens == 5


def test_verify_emits_tokens_distributed_as_plain_sampling() -> None:
    """The speculative-sampling rule against the exact target probabilities (4,000 draws)."""
    rng = np.random.default_rng(0)
    x = rng.normal(scale=1.5, size=40).astype(np.float32)
    cfg = SamplingConfig(temperature=0.8, top_k=20, seed=3)
    sampler = Sampler(cfg)
    ids, p = sampler._distribution(sampler._adjust(x))
    probs = dict(zip(ids.tolist(), p.tolist(), strict=True))
    for draft in (int(ids[0]), int(ids[5]), int(np.argmin(x))):  # likely, unlikely, outside top-k
        draws = [sampler.verify(x, draft) for _ in range(4000)]
        result = goodness_of_fit(draws, probs)
        assert result.passed, (draft, result)


def test_sampled_generation_matches_plain_in_distribution(fake_engine: FakeEngine) -> None:
    """Whole generations on the fake engine, 2,000 seeds each way: same token frequencies per position."""
    prompt = "Repeat:" + REPLY
    cfg = SamplingConfig(temperature=1.0, seed=0)
    plain: list[tuple[int, int]] = []
    spec: list[tuple[int, int]] = []
    drafted = 0
    for seed in range(2000):
        sampling = SamplingConfig(temperature=cfg.temperature, seed=seed)
        a, _ = generate(fake_engine, prompt, Speculation.OFF, sampling, n=4)
        b, done = generate(fake_engine, prompt, Speculation.AUTO, sampling, n=4)
        drafted += done.stats.draft_tokens
        plain.extend(enumerate(a))
        spec.extend(enumerate(b))
    assert drafted > 0
    assert two_sample(plain, spec).passed


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (device_pb2.SPECULATION_UNSPECIFIED, Speculation.AUTO),
        (device_pb2.SPECULATION_OFF, Speculation.OFF),
        (device_pb2.SPECULATION_AUTO, Speculation.AUTO),
        (device_pb2.SPECULATION_FAST, Speculation.FAST),
        (99, Speculation.AUTO),  # a value from a newer client
    ],
)
def test_speculation_is_on_unless_asked_off_on_the_wire(wire: int, expected: Speculation) -> None:
    """Greedy identity holds through the gate (docs/speculation.md), so an unset field means auto."""
    req = device_pb2.GenerateRequest(prompt="hi", speculation=wire)  # type: ignore[arg-type]
    assert job_from(req, "r", 0.0).speculation is expected


def test_a_constrained_request_never_drafts_even_with_speculation_auto(tmp_path: Path) -> None:
    # A draft token is accepted against the model's logits only, so it could leave the grammar:
    # with a constraint, speculation=AUTO decodes plainly (docs/constrained.md).
    artifact = open_artifact(write_fake_artifact(tmp_path, hf_tokenizer=True))
    engine = FakeEngine(artifact, EngineConfig(draft_max=8), reply=REPLY)
    engine.load()
    constraint = Constraint(ConstraintKind.REGEX, r"[A-Za-z .]+")
    tokenizers = TokenizerCache()
    outputs = []
    for spec in (Speculation.OFF, Speculation.AUTO):
        pieces: list[str] = []

        def emit(event: Event, pieces: list[str] = pieces) -> None:
            if isinstance(event, Delta):
                pieces.append(event.text)

        job = GenerationJob(
            "t",
            None,
            (("user", "Repeat:" + REPLY),),
            40,
            SamplingConfig(),
            constraint=constraint,
            speculation=spec,
        )
        guide = TokenGuide.start(constraint, artifact, tokenizers)
        done = run_generation(
            KvCache(engine, WindowPolicy(), costs=COSTS), job, emit, threading.Event(), guide=guide
        )
        assert done.stats.draft_tokens == 0
        assert done.stats.constraint_ms > 0
        outputs.append("".join(pieces))
    assert outputs[0] == outputs[1]
    assert re.fullmatch(r"[A-Za-z .]+", outputs[1])


def test_the_token_loop_refuses_a_guide_with_a_drafter(fake_engine: FakeEngine) -> None:
    cache = KvCache(fake_engine, WindowPolicy(), costs=COSTS)
    guide = cast(TokenGuide, object())  # refused before it is used
    with pytest.raises(ValueError, match="cannot draft"):
        TokenLoop(
            cache,
            Sampler(SamplingConfig()),
            lambda _: False,
            4,
            FeedStats(),
            DraftPolicy(PRIOR_DRAFT_COSTS, 8),
            None,
            guide,
        )
