"""The measured choices of a load: the thread count (autotune) and the forward costs it promises.

Both are cached per artifact and settings (core/tuning_cache.py) and re-checked when the live decode
rate disagrees with what the choice promised (core/retune.py): `fresh` measures again.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from edgellm.common.logs import get_logger
from edgellm.device.core.autotune import ThreadTuning, candidate_threads, tune_threads
from edgellm.device.core.contention import CpuMeter, judge, proc_meter
from edgellm.device.core.loading import EngineFactory
from edgellm.device.core.retune import RateWatch
from edgellm.device.core.tuning_cache import CostsCache, TuningCache, costs_key, tuning_key
from edgellm.device.decoding import CALIBRATION_TEXT, measure_forward_costs
from edgellm.engine.artifact import Artifact
from edgellm.engine.base import Engine
from edgellm.engine.config import EngineConfig
from edgellm.engine.costs import ForwardCosts

log = get_logger(__name__)

MAX_RETUNES = 3  # re-checks per loaded artifact: a machine busy at every idle moment stops here


def usable_cpus() -> int:
    """Cores this process may run on (the affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class Tuner:
    """Chooses threads, times forward costs, and watches whether the choice still holds."""

    def __init__(self, threads: int, data_dir: Path, engine_factory: EngineFactory) -> None:
        self.tuning = ThreadTuning(threads, pinned=True)
        self.data_dir = data_dir
        self.engine_factory = engine_factory
        self.tuned_for = ""  # artifact id the autotune ran on (it runs once per artifact)
        self.fresh = False  # the next load measures again, whatever the caches hold (a re-check)
        self.retunes = 0  # re-checks of the loaded artifact so far
        self.watch = RateWatch(0.0)  # the live decode rate against what the choice promised
        self.meter: CpuMeter = proc_meter()  # other processes' CPU use, for the contention rule

    def starting_load(self) -> None:
        """A load begins: a load that is not a re-check starts the re-check count again."""
        if not self.fresh:
            self.retunes = 0

    def threads_for(self, artifact: Artifact, engine_config: EngineConfig) -> EngineConfig:
        """Measure the thread counts once per artifact (or take the cached pick); load with the fastest."""
        if self.tuned_for != artifact.artifact_id or self.fresh:
            cache, key = TuningCache(self.data_dir), tuning_key(artifact.artifact_id)
            cached = None if self.fresh else cache.get(key)
            if cached is not None:
                self.tuning = cached
                log.info("autotune_cached", threads=cached.threads, path=str(cache.path))
            else:
                cpus = usable_cpus()
                self.tuning = tune_threads(
                    self.engine_factory, artifact, engine_config, candidate_threads(cpus), self.meter, cpus
                )
                cache.put(key, self.tuning)  # refuses a contended tuning
            self.tuned_for = artifact.artifact_id
        return replace(engine_config, threads=self.tuning.threads)

    def forward_costs(self, artifact: Artifact, engine: Engine, engine_config: EngineConfig) -> ForwardCosts:
        """The timed forward costs (the rate watch's promised decode step when threads are pinned; the
        draft policy uses the engine's fixed `draft_costs`, never these): saved by an earlier start
        with the same settings, or timed now (a few dozen forwards; none when draft_max is 0) and
        saved (core/tuning_cache.py)."""
        if engine.draft_max <= 0:
            return ForwardCosts()
        store = CostsCache(self.data_dir)
        key = costs_key(tuning_key(artifact.artifact_id), engine_config)
        costs = None if self.fresh else store.get(key)
        if costs is not None:
            log.info("forward_costs_cached", path=str(store.path), threads=engine_config.threads)
            return costs
        costs = ForwardCosts()
        before = self.meter()
        measure_forward_costs(engine, costs, engine.encode(CALIBRATION_TEXT)[:64])
        # Only the other-processes rule (core/contention.py): single forwards vary too much to
        # compare repeats the way the autotune's halves are compared.
        verdict = judge(before, self.meter(), engine_config.threads, usable_cpus(), (1.0, 1.0))
        if verdict.spoiled:
            log.warning("forward_costs_not_cached", reason=verdict.reason)
            self.tuning = replace(self.tuning, recheck=self.tuning.recheck or "contended forward costs")
        elif costs.seconds:
            store.put(key, costs)
        return costs

    def loaded(self, costs: ForwardCosts) -> None:
        """A load finished: watch the live rate against what the choice promised."""
        self.watch = RateWatch(self.promised_tps(costs))

    def promised_tps(self, costs: ForwardCosts) -> float:
        """The decode rate the measured choice promised: the autotune's pick, else the timed step."""
        if self.tuning.trials:
            return self.tuning.decode_tokens_per_second
        step = costs.seconds.get(1, 0.0)
        return 1.0 / step if step > 0 else 0.0

    def observe_rate(self, decode_tps: float, tokens: int, throttled: bool, constrained: bool) -> None:
        """A finished request's decode rate (worker thread): flag a re-check when it disagrees."""
        reason = self.watch.observe(decode_tps, tokens, throttled, constrained)
        if reason and not self.tuning.recheck:
            log.warning("measured_choice_stale", reason=reason, threads=self.tuning.threads)
            self.tuning = replace(self.tuning, recheck=reason)

    @property
    def retune_due(self) -> bool:
        """Whether a re-check waits (and the per-artifact limit allows one)."""
        return bool(self.tuning.recheck) and self.retunes < MAX_RETUNES

    @contextlib.contextmanager
    def measuring_afresh(self) -> Iterator[None]:
        """Within: loads measure again, ignoring the caches (one more re-check counted)."""
        self.retunes += 1
        self.tuning = replace(self.tuning, recheck="")
        self.fresh = True
        try:
            yield
        finally:
            self.fresh = False

    def pin(self, threads: int) -> None:
        """An explicit thread count (UpdateConfig)."""
        self.tuning = replace(self.tuning, threads=threads, pinned=True)

    def unpin(self) -> None:
        """Choose by measurement again (`config reset` to a start without --threads): the next load
        takes the cached pick for its artifact, or measures."""
        self.tuned_for = ""
