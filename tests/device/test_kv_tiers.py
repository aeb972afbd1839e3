"""KV tiers: a conversation starts in a small budget and moves up without disturbing the cache."""

from __future__ import annotations

import threading

from edgellm.device.generation import Delta, Event, GenerationJob, run_generation
from edgellm.device.sampler import SamplingConfig
from edgellm.engine.kv_cache import KvCache
from edgellm.engine.kv_window import WindowPolicy
from edgellm.engine.mnn import MnnEngine

QUESTIONS = ["Tell me about the history of Rome.", "And what happened after that?"]


def chat(engine: MnnEngine, policy: WindowPolicy, can_grow: bool = True) -> tuple[list[str], KvCache, int]:
    cache = KvCache(
        engine,
        policy,
        engine.special_id("<|im_start|>"),
        engine.special_id("<|im_end|>"),
        can_grow=lambda _: can_grow,
    )
    history: list[tuple[str, str]] = [("system", "You are a helpful AI assistant.")]
    replies, evicted = [], 0
    for q in QUESTIONS:
        history.append(("user", q))
        events: list[Event] = []
        job = GenerationJob("t", None, tuple(history), 40, SamplingConfig(), session_id="tiers")
        done = run_generation(cache, job, events.append, threading.Event())
        reply = "".join(e.text for e in events if isinstance(e, Delta))
        history.append(("assistant", reply))
        replies.append(reply)
        evicted += done.stats.evicted_tokens
    return replies, cache, evicted


def test_moving_up_a_tier_keeps_greedy_output_identical(engine: MnnEngine) -> None:
    fixed, _, fixed_evicted = chat(engine, WindowPolicy(window=512))
    tiered, cache, evicted = chat(engine, WindowPolicy(window=512, tiers=(64,)))
    assert fixed_evicted == evicted == 0
    assert cache.budget == 512  # the conversation outgrew 64 tokens and moved up
    assert tiered == fixed


def test_without_memory_the_cache_slides_within_its_tier(engine: MnnEngine) -> None:
    replies, cache, evicted = chat(engine, WindowPolicy(window=512, tiers=(64,)), can_grow=False)
    assert cache.budget == 64
    assert evicted > 0
    assert all(r.strip() for r in replies)
    assert len(engine.history) <= 64
