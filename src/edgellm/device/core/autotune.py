"""Load-time autotune: time decode and prefill for each candidate thread count, keep the fastest.

MNN reads `thread_num` only inside load(), so each candidate is a real load of the artifact
(weights come from the page cache after the first), a short warm-up, a timed prefill and a timed
run of decode steps, then a close. The pick is the fastest decode (what a user waits for token
by token); prefill is reported beside it. On phones, more threads than big cores is slower (the
little cores hold the big ones back at every barrier): measuring is the only portable answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from edgellm.common.logs import get_logger
from edgellm.device.artifact import Artifact
from edgellm.device.engine.base import Engine
from edgellm.device.engine.config import EngineConfig

log = get_logger(__name__)

TUNE_TEXT = (
    "The river runs past the old mill and under the stone bridge, where the town holds its market "
    "every week; farmers bring bread, cheese, apples and honey from the valley."
)
PREFILL_TOKENS = 64
DECODE_STEPS = 24  # ~0.3-1 s per candidate on a phone-sized model


@dataclass(frozen=True)
class ThreadTrial:
    """One candidate's measured speeds."""

    threads: int
    decode_tokens_per_second: float
    prefill_tokens_per_second: float


@dataclass(frozen=True)
class ThreadTuning:
    """What the autotune measured and chose (`pinned`: --threads was given, nothing measured)."""

    threads: int
    trials: tuple[ThreadTrial, ...] = ()
    pinned: bool = False
    seconds: float = 0.0  # time the measuring took (when it ran: not on a cached pick)
    cached: bool = False  # taken from an earlier start's measurement (core/tuning_cache.py)


def candidate_threads(cpus: int, limit: int = 8) -> tuple[int, ...]:
    """Thread counts worth trying on `cpus` usable cores: 1..cpus, at most `limit`."""
    return tuple(range(1, max(1, min(cpus, limit)) + 1))


def measure(engine: Engine, prompt: Sequence[int], steps: int = DECODE_STEPS) -> tuple[float, float]:
    """(decode tok/s, prefill tok/s): one prefill of `prompt`, `steps` decodes; then reset."""
    engine.reset()
    start = time.perf_counter()
    logits = engine.prefill(prompt)
    prefilled = time.perf_counter()
    token = int(np.argmax(logits))
    for _ in range(steps):
        token = int(np.argmax(engine.decode(token)))
    done = time.perf_counter()
    engine.reset()
    return steps / (done - prefilled), len(prompt) / (prefilled - start)


def tune_threads(
    factory: Callable[[Artifact, EngineConfig], Engine],
    artifact: Artifact,
    config: EngineConfig,
    candidates: Sequence[int],
) -> ThreadTuning:
    """Load the artifact once per candidate thread count, measure, close; the fastest decode wins.

    Trials load without drafting (draft_max 0): the verify module clones are not needed to rank
    thread counts, and the final load makes them.
    """
    start = time.perf_counter()
    trials: list[ThreadTrial] = []
    for threads in candidates:
        engine = factory(artifact, replace(config, threads=threads, draft_max=0))
        try:
            engine.load()
            prompt = (engine.encode(TUNE_TEXT) * 4)[:PREFILL_TOKENS]
            engine.warm_up(len(prompt))
            measure(engine, prompt, steps=4)  # first forwards after load are slower: not counted
            decode, prefill = measure(engine, prompt)
        finally:
            engine.close()
        trials.append(ThreadTrial(threads, decode, prefill))
        log.info(
            "autotune_trial", threads=threads, decode_tps=round(decode, 1), prefill_tps=round(prefill, 1)
        )
    best = max(trials, key=lambda t: t.decode_tokens_per_second)
    tuning = ThreadTuning(best.threads, tuple(trials), seconds=time.perf_counter() - start)
    log.info("autotune_done", threads=best.threads, seconds=round(tuning.seconds, 1))
    return tuning
