"""Speculative decoding on the real model: greedy answers unchanged, and the acceptance rule on real logits.

Why "on these prompts" and not "always": MNN's multi-token forward (W4A8 kernels on x86) gives
logits up to ~0.7 away from a one-token decode of the same position (docs/engine.md), so a
near-tie can flip between the two paths. The prompts below are fixed and the runtime is
deterministic, so this test is exact and repeatable; bench/bench_spec.py reports the identity
rate over both prompt sets.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgellm.common.chi2 import goodness_of_fit
from edgellm.device.artifact import open_artifact
from edgellm.device.decoding import Speculation
from edgellm.device.drafting import ForwardCosts
from edgellm.device.engine.config import EngineConfig
from edgellm.device.engine.mnn import MnnEngine
from edgellm.device.generation import Delta, Event, GenerationJob, run_generation
from edgellm.device.kv_cache import KvCache
from edgellm.device.kv_window import WindowPolicy
from edgellm.device.sampler import Sampler, SamplingConfig

PASSAGE = (
    "The river runs past the old mill and under the stone bridge, where the town holds its market every "
    "week. Farmers bring bread, cheese, apples and honey from the valley, and the square fills by nine."
)
PROMPTS = (
    f"Repeat the following passage word for word.\n\n{PASSAGE}",
    "Rename the function `area` to `rectangle_area` and return the whole file.\n\n```python\n"
    "def area(width, height):\n    return width * height\n\n\ndef total(shapes):\n"
    "    return sum(area(w, h) for w, h in shapes)\n```",
    "What is the capital of France?",
)


@pytest.fixture(scope="module")
def spec_cache(default_artifact: Path) -> Iterator[KvCache]:
    """The real model loaded for drafting (draft_max 8).

    Forward costs start from fixed ratios (a verify of k+1 tokens ~ 1 + 0.15k decode steps) rather
    than a timing at load: the test must draft however loaded the machine is.
    """
    engine = MnnEngine(open_artifact(default_artifact), EngineConfig(threads=2, draft_max=8))
    engine.load()
    engine.warm_up(64)
    costs = ForwardCosts.fixed({n: 0.01 * (1 + 0.15 * (n - 1)) for n in (1, 2, 3, 5, 9)})
    yield KvCache(engine, WindowPolicy(), costs=costs)
    engine.close()


def generate(cache: KvCache, prompt: str, spec: Speculation, n: int = 48) -> tuple[list[int], int]:
    tokens: list[int] = []

    def emit(event: Event) -> None:
        if isinstance(event, Delta):
            tokens.extend(event.token_ids)

    job = GenerationJob("t", None, (("user", prompt),), n, SamplingConfig(), speculation=spec)
    done = run_generation(cache, job, emit, threading.Event())
    return tokens, done.stats.accepted_draft_tokens


def test_greedy_answers_are_token_for_token_the_same_with_speculation(spec_cache: KvCache) -> None:
    accepted = 0
    for prompt in PROMPTS:
        plain, _ = generate(spec_cache, prompt, Speculation.OFF)
        spec, ok = generate(spec_cache, prompt, Speculation.AUTO)
        assert spec == plain, prompt[:40]
        accepted += ok
    assert accepted > 0  # the grounded prompts really were drafted


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
