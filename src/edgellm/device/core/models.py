"""The loaded model's lifecycle: load, warm up, unload, keep-alive, and memory across restarts.

Loads run on the engine's worker thread, between generations, so a switch never races a request.
The model loaded last is remembered in `<data_dir>/loaded.json` and reloaded at start; artifact
directories loaded from outside the store are remembered in `<data_dir>/directories.json` so
ListModels keeps showing them after a switch (while they exist).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgellm.common.errors import EdgeError, FailedPrecondition, NotFound, Unavailable
from edgellm.common.logs import get_logger
from edgellm.common.runtime import Runtime
from edgellm.device.admission import admit, kv_bytes, memory_need
from edgellm.device.config import DaemonConfig
from edgellm.device.core.autotune import ThreadTuning, candidate_threads, tune_threads
from edgellm.device.core.contention import CpuMeter, judge, proc_meter
from edgellm.device.core.retune import RateWatch
from edgellm.device.core.state import EngineState, LoadInfo
from edgellm.device.core.tuning_cache import CostsCache, TuningCache, costs_key, tuning_key
from edgellm.device.decoding import CALIBRATION_TEXT, measure_forward_costs
from edgellm.device.store import ArtifactStore
from edgellm.device.telemetry.process import read_meminfo
from edgellm.device.worker import EngineWorker
from edgellm.engine.artifact import Artifact, open_artifact
from edgellm.engine.base import Engine
from edgellm.engine.config import EngineConfig, attention_mode
from edgellm.engine.costs import ForwardCosts
from edgellm.engine.kv_cache import KvCache
from edgellm.engine.kv_window import KvMethod, WindowPolicy

log = get_logger(__name__)

EngineFactory = Callable[[Artifact, EngineConfig], Engine]
# Why 8: a model named by an id prefix must be unambiguous among a handful of artifacts and
# still be typeable; 8 hex digits (32 bits) is what `git` shows by default, and the store agrees.
MIN_ID_PREFIX = 8
MAX_RETUNES = 3  # re-checks per loaded artifact: a machine busy at every idle moment stops here


def check_forward(engine: Engine) -> None:
    """One real token through the model, so a model MNN "loaded" without its graph is refused now
    (S3: `load()` does not report a missing graph; the first forward used to crash the daemon)."""
    logits = engine.prefill([0])
    engine.reset()
    if not np.all(np.isfinite(np.asarray(logits))):
        raise FailedPrecondition("the model loaded but its first forward gave non-finite logits")


def same_load(crashed: dict[str, str], path: Path, artifact_id: object = None) -> bool:
    """Whether a crashed-load record names this artifact (an unreadable record names every one)."""
    if not crashed:
        return True
    return crashed.get("path") == str(path) or crashed.get("artifact_id") in (artifact_id, path.name)


def usable_cpus() -> int:
    """Cores this process may run on (the affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def names(artifact: Artifact, name: str) -> bool:
    """Whether `name` is the artifact's name, its id, or a prefix of its id (MIN_ID_PREFIX+ digits)."""
    by_prefix = len(name) >= MIN_ID_PREFIX and artifact.artifact_id.startswith(name)
    return name in (artifact.name, artifact.artifact_id) or by_prefix


@dataclass
class LoadUnderway:
    """A load in progress: what it loads (a path's name until the manifest is read) and since when."""

    name: str
    started: float  # time.monotonic()
    done: asyncio.Event

    @property
    def seconds(self) -> float:
        """How long it has been loading."""
        return time.monotonic() - self.started


@dataclass(frozen=True)
class Loaded:
    """The model in the engine: what was loaded, the engine, and the driver of its KV cache."""

    info: LoadInfo
    engine: Engine
    cache: KvCache

    @property
    def artifact(self) -> Artifact:
        """The loaded artifact."""
        return self.info.artifact


class ModelLifecycle:
    """Owns which model is loaded (`loaded`, `state`) and the settings the next load uses (`config`)."""

    def __init__(
        self, config: DaemonConfig, worker: EngineWorker, store: ArtifactStore, engine_factory: EngineFactory
    ) -> None:
        self.config = config
        self.worker = worker
        self.store = store
        self.engine_factory = engine_factory
        self.loaded: Loaded | None = None
        self.loading: LoadUnderway | None = None  # set on the event loop for the whole of load()
        self.load_waiters = 0  # requests waiting for it (the startup race: they wait, not fail)
        self.state = EngineState.EMPTY  # EMPTY, LOADING or IDLE; the scheduler reports its own phases
        self.last_used = time.monotonic()
        self._listeners: list[Callable[[bool], None]] = []
        self.tuning = ThreadTuning(config.threads, pinned=True)
        self._tuned_for = ""  # artifact id the autotune ran on (it runs once per artifact)
        self._fresh = False  # the next load measures again, whatever the caches hold (a re-check)
        self._retunes = 0  # re-checks of the loaded artifact so far
        self.watch = RateWatch(0.0)  # the live decode rate against what the choice promised
        self.meter: CpuMeter = proc_meter()  # other processes' CPU use, for the contention rule
        self.on_threads: Callable[[int], None] = lambda threads: None  # the governor's ladder follows

    def on_change(self, callback: Callable[[bool], None]) -> None:
        """Register a callback told True when a model is loaded, False when none is."""
        self._listeners.append(callback)

    # -- load and unload ---------------------------------------------------------------------------
    async def load(self, path: Path) -> LoadInfo:
        """Load an artifact on the worker thread (replacing any loaded one) and warm it up.

        Before the engine sees it, the artifact is checked off the event loop: regular files of the
        listed sizes and sha256, links only into the store's blobs (S1, S6); the MNN engine then
        checks the files its config names (S3). A "loading" marker is on disk while MNN works, so a
        native crash is known at the next start (`crashed_last_load`); the model is remembered for
        restarts only after a real forward succeeded.
        """
        underway = self.loading = LoadUnderway(path.name, time.monotonic(), asyncio.Event())
        try:
            loaded = await self._load_checked(path, underway)
        finally:
            underway.done.set()  # waiting requests look again: at the model, or at why it is not there
            if self.loading is underway:
                self.loading = None
        self.watch = RateWatch(self.promised_tps(loaded))
        if not self.tuning.pinned:
            self.on_threads(self.tuning.threads)  # on the event loop, where the governor lives
        self.last_used = time.monotonic()
        self._remember(loaded.artifact)
        self._notify(True)
        return loaded.info

    async def _load_checked(self, path: Path, underway: LoadUnderway) -> Loaded:
        artifact = await asyncio.to_thread(self._open_checked, path)
        underway.name = artifact.name
        engine_config = self.engine_config(artifact.runtime)
        self.check_memory(artifact, engine_config.attention_mode)
        self._write_json(
            self._loading_file, {"path": str(artifact.path), "artifact_id": artifact.artifact_id}
        )
        if not self._fresh:
            self._retunes = 0
        try:
            return await asyncio.wrap_future(self.worker.call(lambda: self._load(artifact, engine_config)))
        finally:
            self._loading_file.unlink(missing_ok=True)  # a Python-level failure is not a crash

    async def wait_for_load(self, wait_s: float) -> None:
        """With no model loaded but one loading, wait for that load up to WAIT_S seconds.

        Why: a request that arrives while the daemon loads its startup model (or switches models)
        used to be told "no model is loaded" although one was on its way. It now waits, as Ollama's
        do; past WAIT_S it gets UNAVAILABLE saying what is loading and for how long. A load that
        fails leaves the request to require_loaded's answer.
        """
        deadline = time.monotonic() + wait_s
        while self.loaded is None and (underway := self.loading) is not None:
            self.load_waiters += 1
            try:
                await asyncio.wait_for(underway.done.wait(), max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                raise Unavailable(
                    f"model {underway.name} is loading (for {underway.seconds:.0f} s); retry when "
                    "`edgellm status` shows it loaded, or give the call a longer deadline"
                ) from None
            finally:
                self.load_waiters -= 1

    def _open_checked(self, path: Path) -> Artifact:
        in_store = path.resolve().parent == self.store.artifacts.resolve()
        return open_artifact(path, verify_hashes=True, links_into=self.store.blobs if in_store else None)

    def crashed_last_load(self) -> dict[str, str] | None:
        """The load ({path, artifact_id}) under way when the daemon last died, if any; clears it."""
        try:
            record = json.loads(self._loading_file.read_text())
        except (OSError, ValueError):
            return None
        self._loading_file.unlink(missing_ok=True)
        log.error("last_load_crashed", record=record, action="not reloading it at start; LoadModel retries")
        return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else {}

    def _load(self, artifact: Artifact, engine_config: EngineConfig) -> Loaded:
        """On the worker thread: free the old engine, then build, load and warm up the new one."""
        self.state = EngineState.LOADING
        old, self.loaded = self.loaded, None
        if old is not None:
            old.engine.close()
        try:
            engine_config = self._autotune(artifact, engine_config)
            engine = self.engine_factory(artifact, engine_config)
            engine.load()
            policy = self.window_policy()
            policy.validate(engine.context_length)
            costs = ForwardCosts()
            if self.config.warmup:
                engine.warm_up(self.warmup_tokens(policy, engine.context_length))
                # The draft policy prices verify lengths by these. Without a warm-up nothing is
                # timed and drafting stays off.
                costs = self._forward_costs(artifact, engine, engine_config)
            else:
                check_forward(engine)
        except BaseException:
            self.state = EngineState.EMPTY
            raise
        cache = KvCache(
            engine,
            policy,
            engine.special_id("<|im_start|>"),
            engine.special_id("<|im_end|>"),
            can_grow=lambda extra: self.can_hold_kv(artifact, extra, engine_config.attention_mode),
            costs=costs,
        )
        info = LoadInfo(artifact, engine.context_length, engine.load_ms, engine.warmup_ms)
        self.loaded = Loaded(info, engine, cache)
        self.state = EngineState.IDLE
        return self.loaded

    def _forward_costs(self, artifact: Artifact, engine: Engine, engine_config: EngineConfig) -> ForwardCosts:
        """The draft policy's forward costs: saved by an earlier start with the same settings, or
        timed now (a few dozen forwards; none when draft_max is 0) and saved (core/tuning_cache.py)."""
        if engine.draft_max <= 0:
            return ForwardCosts()
        store = CostsCache(self.config.data_dir)
        key = costs_key(tuning_key(artifact.artifact_id), engine_config)
        costs = None if self._fresh else store.get(key)
        if costs is not None:
            log.info("forward_costs_cached", path=str(store.path), threads=engine_config.threads)
            return costs
        costs = ForwardCosts()
        meter = self.meter
        before = meter()
        measure_forward_costs(engine, costs, engine.encode(CALIBRATION_TEXT)[:64])
        # Only the other-processes rule (core/contention.py): single forwards vary too much to
        # compare repeats the way the autotune's halves are compared.
        verdict = judge(before, meter(), engine_config.threads, usable_cpus(), (1.0, 1.0))
        if verdict.spoiled:
            log.warning("forward_costs_not_cached", reason=verdict.reason)
            self.tuning = replace(self.tuning, recheck=self.tuning.recheck or "contended forward costs")
        elif costs.seconds:
            store.put(key, costs)
        return costs

    def _autotune(self, artifact: Artifact, engine_config: EngineConfig) -> EngineConfig:
        """With autotune on, measure the thread counts once per artifact and load with the fastest."""
        if not self.config.autotune:
            return engine_config
        if self._tuned_for != artifact.artifact_id or self._fresh:
            cache, key = TuningCache(self.config.data_dir), tuning_key(artifact.artifact_id)
            cached = None if self._fresh else cache.get(key)
            if cached is not None:
                self.tuning = cached
                log.info("autotune_cached", threads=cached.threads, path=str(cache.path))
            else:
                cpus = usable_cpus()
                self.tuning = tune_threads(
                    self.engine_factory, artifact, engine_config, candidate_threads(cpus), self.meter, cpus
                )
                cache.put(key, self.tuning)  # refuses a contended tuning
            self._tuned_for = artifact.artifact_id
            self.config = replace(self.config, threads=self.tuning.threads)
        return replace(engine_config, threads=self.tuning.threads)

    # -- re-checking measured choices (core/retune.py) ----------------------------------------------
    def promised_tps(self, loaded: Loaded) -> float:
        """The decode rate the measured choice promised: the autotune's pick, else the timed step."""
        if self.tuning.trials:
            return self.tuning.decode_tokens_per_second
        step = loaded.cache.costs.seconds.get(1, 0.0)
        return 1.0 / step if step > 0 else 0.0

    def observe_rate(self, decode_tps: float, tokens: int, throttled: bool, constrained: bool) -> None:
        """A finished request's decode rate (worker thread): flag a re-check when it disagrees."""
        reason = self.watch.observe(decode_tps, tokens, throttled, constrained)
        if reason and not self.tuning.recheck:
            log.warning("measured_choice_stale", reason=reason, threads=self.tuning.threads)
            self.tuning = replace(self.tuning, recheck=reason)

    @property
    def retune_due(self) -> bool:
        """Whether a re-check waits for an idle moment (and the per-artifact limit allows one)."""
        return bool(self.tuning.recheck) and self.loaded is not None and self._retunes < MAX_RETUNES

    async def retune(self) -> LoadInfo | None:
        """Reload the loaded artifact measuring afresh (threads and forward costs), saving clean results.

        Call only while idle: the model is reloaded, so a request arriving meanwhile waits for it.
        """
        loaded = self.loaded
        if loaded is None:
            return None
        self._retunes += 1
        self.tuning = replace(self.tuning, recheck="")
        self._fresh = True
        try:
            return await self.load(loaded.artifact.path)
        finally:
            self._fresh = False

    def pin_threads(self, threads: int) -> None:
        """An explicit thread count (UpdateConfig): no more autotune until restart."""
        self.config = replace(self.config, threads=threads, autotune=False)
        self.tuning = replace(self.tuning, threads=threads, pinned=True)

    async def unload(self, forget: bool = True) -> None:
        """Unload the model (waits for the running generation to finish)."""
        await asyncio.wrap_future(self.worker.call(self.close))
        if forget:
            self._remember(None)
        self._notify(False)

    def close(self) -> None:
        """Free the engine now (on the worker thread, or once it has stopped)."""
        if self.loaded is not None:
            self.loaded.engine.close()
        self.loaded = None
        self.state = EngineState.EMPTY

    def _notify(self, loaded: bool) -> None:
        for callback in self._listeners:
            callback(loaded)

    # -- settings for a load -----------------------------------------------------------------------
    def engine_config(self, runtime: Runtime) -> EngineConfig:
        """Runtime settings for an artifact: its own, with the daemon's threads and --kv-quant (if set)."""
        c = self.config
        slides_by_erase = bool(c.kv_window) and c.kv_method == KvMethod.ERASE
        mode = attention_mode(runtime, c.kv_quant, slides_by_erase)
        config = EngineConfig.for_runtime(runtime, threads=c.threads, attention_mode=mode)
        return replace(config, draft_max=c.draft_max, scratch_dir=str(c.data_dir / "mnn-tmp"))

    def window_policy(self) -> WindowPolicy:
        """The daemon's sliding-window policy."""
        c = self.config
        return WindowPolicy(
            window=c.kv_window, n_keep=c.n_keep, chunk=c.kv_chunk, method=c.kv_method, tiers=c.kv_tiers
        )

    def warmup_tokens(self, policy: WindowPolicy, context_length: int) -> int:
        """Warm-up prefill length: warmup_tokens, within the first KV budget (room for 4 decode steps)."""
        first_budget = policy.budgets[0] if policy.budgets else context_length
        return max(1, min(self.config.warmup_tokens, first_budget - 8))

    # -- memory admission --------------------------------------------------------------------------
    def check_memory(self, artifact: Artifact, kv_mode: int) -> None:
        """Refuse (ResourceExhausted) a model that MemAvailable cannot hold with its KV budget.

        `kv_mode` is the MNN attention_mode the load will use (it sets the KV bytes per token).
        """
        c = self.config
        need = memory_need(artifact, c.kv_window or c.kv_budget_tokens, c.memory_margin_bytes, kv_mode)
        freed = self.loaded.artifact.size_bytes if self.loaded is not None else 0
        admit(need, read_meminfo(c.proc_root), freed)

    def can_hold_kv(self, artifact: Artifact, extra_tokens: int, kv_mode: int) -> bool:
        """Whether MemAvailable covers `extra_tokens` more KV positions at `kv_mode`, plus the margin."""
        need = kv_bytes(artifact, extra_tokens, kv_mode) + self.config.memory_margin_bytes
        return read_meminfo(self.config.proc_root).available_bytes >= need

    # -- naming models -----------------------------------------------------------------------------
    def require_loaded(self, name: str = "") -> Loaded:
        """The loaded model, checking that a request's `model` (name, id or id prefix) names it."""
        loaded = self.loaded
        if loaded is None:
            raise FailedPrecondition(
                "no model is loaded; load one with `edgellm load` or start the daemon with --model"
            )
        art = loaded.artifact
        if name and not names(art, name):
            raise NotFound(f"model {name!r} is not loaded (loaded: {art.name} {art.artifact_id[:12]})")
        return loaded

    def is_loaded(self, artifact_id: str) -> bool:
        """Whether the artifact with this id is the loaded one."""
        return self.loaded is not None and self.loaded.artifact.artifact_id == artifact_id

    def resolve(self, name: str) -> Path:
        """A LoadModel name: installed artifact (id, prefix, name), a loaded-before directory, or a path.

        A path is accepted only when the daemon runs with --allow-dir-load (S6): without it, only
        what went through PushArtifact's checks, or what the operator loaded at start, loads.
        """
        if not name:
            raise FailedPrecondition("name the model to load: an artifact id, its name, or a directory")
        with contextlib.suppress(NotFound):
            return self.store.resolve_dir(name)
        for art in self.directories():
            if names(art, name):
                return art.path
        if "/" in name:
            if not self.config.allow_dir_load:
                raise FailedPrecondition(
                    f"{name!r} is a directory: LoadModel loads installed artifacts only (push it with "
                    "`edgellm push`), unless the daemon was started with --allow-dir-load"
                )
            if Path(name).is_dir():
                return Path(name)
        raise NotFound(f"no installed artifact or artifact directory called {name!r} (see `edgellm models`)")

    def directories(self) -> list[Artifact]:
        """Artifact directories loaded from outside the store that still open (ListModels shows them)."""
        out = []
        for path in self._read_json(self._directories_file, []):
            with contextlib.suppress(EdgeError, OSError, ValueError):
                out.append(open_artifact(Path(path)))
        return out

    # -- memory across restarts --------------------------------------------------------------------
    @property
    def _loaded_file(self) -> Path:
        return self.config.data_dir / "loaded.json"

    @property
    def _loading_file(self) -> Path:
        return self.config.data_dir / "loading.json"

    @property
    def _directories_file(self) -> Path:
        return self.config.data_dir / "directories.json"

    def _remember(self, artifact: Artifact | None) -> None:
        if artifact is None:
            self._loaded_file.unlink(missing_ok=True)
            return
        record = {"path": str(artifact.path), "artifact_id": artifact.artifact_id}
        self._write_json(self._loaded_file, record)
        if artifact.path.resolve().parent != self.store.artifacts.resolve():
            known = [p for p in self._read_json(self._directories_file, []) if Path(p).is_dir()]
            if str(artifact.path) not in known:
                self._write_json(self._directories_file, [*known, str(artifact.path)])

    def _read_json(self, path: Path, default: list[str]) -> list[str]:
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            return default
        return [str(v) for v in value] if isinstance(value, list) else default

    def _write_json(self, path: Path, value: object) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(value))
        tmp.replace(path)

    async def restore(self) -> LoadInfo | None:
        """Reload the model loaded before the last shutdown, if any (a failure is logged, not fatal)."""
        crashed = self.crashed_last_load()
        try:
            record = json.loads(self._loaded_file.read_text())
        except (OSError, ValueError):
            return None
        if crashed is not None and same_load(
            crashed, Path(str(record.get("path"))), record.get("artifact_id")
        ):
            log.warning("restore_skipped", record=record, reason="its load crashed the daemon last time")
            return None
        try:
            info = await self.load(Path(record["path"]))
        except (EdgeError, OSError, KeyError) as err:
            log.warning("restore_failed", record=record, error=str(err))
            return None
        log.info("model_restored", artifact_id=info.artifact.artifact_id[:12], load_ms=round(info.load_ms, 1))
        return info

    async def keep_alive(self, busy: Callable[[], bool]) -> None:
        """Unload the model after config.keep_alive_s idle seconds (run as a task; 0 = never)."""
        ttl = self.config.keep_alive_s
        if ttl <= 0:
            return
        while True:
            await asyncio.sleep(min(ttl / 4, 5.0))
            idle = time.monotonic() - self.last_used
            if self.loaded is not None and self.state == EngineState.IDLE and not busy() and idle > ttl:
                log.info("idle_unload", idle_s=round(idle, 1))
                await self.unload(forget=False)
