"""Speculative decoding on the real model: greedy answers unchanged, and the acceptance rule on real logits.

MNN's multi-token forward gives logits up to a spread of ~1.7 away from one-token decodes
(docs/engine.md), so greedy speculation is identical to plain decoding only through the gate
(`Engine.logit_tolerance`, docs/speculation.md): these tests hold it to that on the checked-in
prompt sets (bench/prompts), a few prompts of each in `make test`, every prompt under `-m slow`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.bench_spec import divergence
from edgellm.common.chi2 import goodness_of_fit
from edgellm.device import generation
from edgellm.device.decoding import Speculation
from edgellm.device.generation import Delta, Event, GenerationJob, Stats, run_generation
from edgellm.device.sampler import Sampler, SamplingConfig
from edgellm.engine.artifact import open_artifact
from edgellm.engine.config import EngineConfig
from edgellm.engine.kv_cache import KvCache
from edgellm.engine.kv_window import WindowPolicy
from edgellm.engine.mnn import MnnEngine

SETS = Path(__file__).parents[2] / "bench" / "prompts"
# docs/speculation.md: a `fast` greedy answer leaves plain decoding's only where plain's own logits
# led by <= 0.25 / 0.51 (two runs over 59 prompts). Measured here: one of the 5 quick prompts
# leaves plain (an open question, gap 0.023); the gate's tolerance (3.5) is the bound by design.
FAST_GAP_DOCUMENTED = 0.51


def prompt_set(name: str) -> list[str]:
    """One checked-in prompt set (bench/prompts/spec_<name>.jsonl)."""
    return [json.loads(line)["prompt"] for line in (SETS / f"spec_{name}.jsonl").read_text().splitlines()]


def quick_prompts() -> list[str]:
    """A few of each set for `make test` (a wikitext passage, the code edit, open questions)."""
    grounded, open_ = prompt_set("grounded"), prompt_set("open")
    code = next(p for p in grounded if "```" in p)
    return [grounded[0], grounded[1], code, open_[0], open_[1]]


@pytest.fixture(scope="module")
def spec_cache(default_artifact: Path) -> Iterator[KvCache]:
    """The real model loaded for drafting (draft_max 8); the draft policy prices verifies by the
    engine's fixed `draft_costs`, so the test drafts the same however loaded the machine is."""
    engine = MnnEngine(open_artifact(default_artifact), EngineConfig(threads=2, draft_max=8))
    engine.load()
    engine.warm_up(64)
    yield KvCache(engine, WindowPolicy())
    engine.close()


def generate(cache: KvCache, prompt: str, spec: Speculation, n: int) -> tuple[list[int], Stats]:
    tokens: list[int] = []

    def emit(event: Event) -> None:
        if isinstance(event, Delta):
            tokens.extend(event.token_ids)

    job = GenerationJob("t", None, (("user", prompt),), n, SamplingConfig(), speculation=spec)
    done = run_generation(cache, job, emit, threading.Event())
    return tokens, done.stats


def assert_identical(cache: KvCache, prompts: list[str], n: int, drafted: bool = True) -> None:
    """Greedy AUTO == OFF on every prompt; with drafted, drafts were accepted and repairs happened."""
    accepted, repaired, differ = 0, 0, []
    for prompt in prompts:
        plain, _ = generate(cache, prompt, Speculation.OFF, n)
        spec, stats = generate(cache, prompt, Speculation.AUTO, n)
        if spec != plain:
            differ.append(prompt[:50])
        accepted += stats.accepted_draft_tokens
        repaired += stats.repaired_tokens
    assert not differ, f"{len(differ)}/{len(prompts)} greedy answers changed with speculation: {differ}"
    if drafted:
        assert accepted > 0 and repaired > 0  # drafts were accepted, and the gate had to recompute


@pytest.fixture
def draft_freely(monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy drafts wherever the draft policy likes, not only after a confident run.

    Why: with the confident-run rule greedy requests on MNN's W4A8 kernels almost never draft
    (docs/speculation.md), which would leave the gate and the repair untested on the real model.
    """
    monkeypatch.setattr(generation, "CONFIDENT_RUN", 0)


def test_greedy_answers_are_token_for_token_the_same_with_auto_as_shipped(spec_cache: KvCache) -> None:
    """What a user gets: the shipped `auto` (confident-run rule on; it rarely drafts greedy here)."""
    assert_identical(spec_cache, quick_prompts(), 48, drafted=False)


@pytest.mark.usefixtures("draft_freely")
def test_with_drafting_forced_the_gate_and_repair_keep_greedy_answers_identical(spec_cache: KvCache) -> None:
    """The mechanism behind auto's promise, exercised on every position (CONFIDENT_RUN 0)."""
    assert_identical(spec_cache, quick_prompts(), 48)


@pytest.mark.slow
@pytest.mark.usefixtures("draft_freely")
@pytest.mark.parametrize("name", ["grounded", "open"])
def test_greedy_answers_are_the_same_with_speculation_on_every_prompt_of_both_sets(
    spec_cache: KvCache, name: str
) -> None:
    assert_identical(spec_cache, prompt_set(name), 64)


def test_fast_drafts_greedy_grounded_answers_and_leaves_plain_only_at_near_ties(spec_cache: KvCache) -> None:
    """`fast` verifies drafts from the first token (no confident run, no repair); an answer that
    differs from plain decoding's does so where plain's own top choice led by less than the
    batched-vs-one-token tolerance (a near-tie the W4A8 numerics decided), by no more than the
    documented gap."""
    accepted = 0
    for prompt in quick_prompts():  # the open questions too: that is where near-ties are
        plain, _ = generate(spec_cache, prompt, Speculation.OFF, 48)
        fast, stats = generate(spec_cache, prompt, Speculation.FAST, 48)
        assert stats.repaired_tokens == 0
        accepted += stats.accepted_draft_tokens
        differs = divergence(spec_cache.engine, prompt, plain, fast)  # plain's own gap there
        if differs is not None:
            assert 0.0 <= differs["gap"] <= FAST_GAP_DOCUMENTED, (prompt[:40], differs)
    assert accepted > 0


def test_acceptance_rule_on_real_logits_keeps_the_distribution(spec_cache: KvCache) -> None:
    """4,000 draws through Sampler.verify on a verified row of the real model vs its exact probabilities."""
    engine = spec_cache.engine
    engine.reset()
    ids = engine.encode(engine.apply_chat_template([("user", "Tell me a story about a cat.")]))
    first = int(np.argmax(engine.prefill(ids)))
    rows = engine.verify([first, first])  # the second row is what a draft would be checked against
    engine.reset()
    sampler = Sampler(SamplingConfig(temperature=0.8, seed=5))
    cand, p = sampler._distribution(sampler._adjust(rows[1]))
    probs = dict(zip(cand.tolist(), p.tolist(), strict=True))
    for draft in (int(cand[0]), int(cand[3])):
        result = goodness_of_fit([sampler.verify(rows[1], draft) for _ in range(4000)], probs)
        assert result.passed, (draft, result)
