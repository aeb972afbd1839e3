"""Load-time autotune: time decode and prefill for each candidate thread count, keep the fastest.

MNN reads `thread_num` only inside load(), so each candidate is a real load of the artifact
(weights come from the page cache after the first), a short warm-up, a timed prefill and a timed
run of decode steps, then a close. The pick is the fastest decode (what a user waits for token
by token); prefill is reported beside it. On phones, more threads than big cores is slower (the
little cores hold the big ones back at every barrier): measuring is the only portable answer.

Contention (core/contention.py): a trial timed while other processes held the cores it needs is
measured again (up to RETRIES times) and, if still spoiled, marked `contended`. Contention only
slows a trial, so a contended winner still won; a contended *loser* might have won: then the
tuning is used for this load only, never cached, and re-measured at the next idle moment.
Why: a start during a test run once cached a 2-thread trial at 4.3 tok/s against 94 for 1 thread,
and every later daemon on that machine decoded on one thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from edgellm.common.logs import get_logger
from edgellm.device.core.contention import CpuMeter, Verdict, judge, proc_meter
from edgellm.engine.artifact import Artifact
from edgellm.engine.base import Engine
from edgellm.engine.config import EngineConfig

log = get_logger(__name__)

TUNE_TEXT = (
    "The river runs past the old mill and under the stone bridge, where the town holds its market "
    "every week; farmers bring bread, cheese, apples and honey from the valley."
)
PREFILL_TOKENS = 64
DECODE_STEPS = 24  # ~0.3-1 s per candidate on a phone-sized model (timed in two halves)
RETRIES = 2  # re-measures of a spoiled trial before it is kept as `contended`


@dataclass(frozen=True)
class ThreadTrial:
    """One candidate's measured speeds."""

    threads: int
    decode_tokens_per_second: float
    prefill_tokens_per_second: float
    contended: bool = False  # still spoiled by other processes after RETRIES re-measures


@dataclass(frozen=True)
class ThreadTuning:
    """What the autotune measured and chose (`pinned`: --threads was given, nothing measured)."""

    threads: int
    trials: tuple[ThreadTrial, ...] = ()
    pinned: bool = False
    seconds: float = 0.0  # time the measuring took (when it ran: not on a cached pick)
    cached: bool = False  # taken from an earlier start's measurement (core/tuning_cache.py)
    measured_unix: float = field(default_factory=time.time)  # when the trials ran (0 = unknown)
    recheck: str = ""  # why a re-tune is due at the next idle moment ("" = none)

    @property
    def contended(self) -> bool:
        """Whether a losing trial was spoiled by contention, so the pick is in doubt (not cached)."""
        return any(t.contended for t in self.trials if t.threads != self.threads)

    @property
    def decode_tokens_per_second(self) -> float:
        """The chosen count's measured decode rate (0 when pinned or not measured)."""
        return next((t.decode_tokens_per_second for t in self.trials if t.threads == self.threads), 0.0)


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


def timed_trial(
    engine: Engine, prompt: Sequence[int], threads: int, cpus: int, meter: CpuMeter
) -> ThreadTrial:
    """One candidate's speeds, re-measured while contention spoils them (up to RETRIES times).

    The decode steps run in two halves: each judged (core/contention.py) on the other processes'
    CPU use and on whether its halves agree.
    """
    verdict = Verdict(spoiled=True)
    decode = prefill = 0.0
    for attempt in range(RETRIES + 1):
        before = meter()
        first, prefill = measure(engine, prompt, steps=DECODE_STEPS // 2)
        second, _ = measure(engine, prompt, steps=DECODE_STEPS // 2)
        verdict = judge(before, meter(), threads, cpus, (first, second))
        decode = (first + second) / 2
        if not verdict.spoiled:
            break
        log.warning("autotune_trial_contended", threads=threads, attempt=attempt + 1, reason=verdict.reason)
    return ThreadTrial(threads, decode, prefill, contended=verdict.spoiled)


def tune_threads(
    factory: Callable[[Artifact, EngineConfig], Engine],
    artifact: Artifact,
    config: EngineConfig,
    candidates: Sequence[int],
    meter: CpuMeter | None = None,
    cpus: int = 0,
) -> ThreadTuning:
    """Load the artifact once per candidate thread count, measure, close; the fastest decode wins.

    Trials load without drafting (draft_max 0): the verify module clones are not needed to rank
    thread counts, and the final load makes them. The fastest trial wins, contended or not (a
    contended rate is a lower bound).
    """
    meter = meter or proc_meter()
    cpus = cpus or max(candidates, default=1)  # usable cores (the candidates go up to them)
    start = time.perf_counter()
    trials: list[ThreadTrial] = []
    for threads in candidates:
        engine = factory(artifact, replace(config, threads=threads, draft_max=0))
        try:
            engine.load()
            prompt = (engine.encode(TUNE_TEXT) * 4)[:PREFILL_TOKENS]
            engine.warm_up(len(prompt))
            measure(engine, prompt, steps=4)  # first forwards after load are slower: not counted
            trial = timed_trial(engine, prompt, threads, cpus, meter)
        finally:
            engine.close()
        trials.append(trial)
        log.info(
            "autotune_trial",
            threads=threads,
            decode_tps=round(trial.decode_tokens_per_second, 1),
            prefill_tps=round(trial.prefill_tokens_per_second, 1),
            contended=trial.contended,
        )
    best = max(trials, key=lambda t: t.decode_tokens_per_second)
    tuning = ThreadTuning(best.threads, tuple(trials), seconds=time.perf_counter() - start)
    if tuning.contended:
        tuning = replace(tuning, recheck="contended trials")
    log.info(
        "autotune_done", threads=best.threads, seconds=round(tuning.seconds, 1), contended=tuning.contended
    )
    return tuning
