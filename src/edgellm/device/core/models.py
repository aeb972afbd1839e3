"""The loaded model's lifecycle: load, warm up, unload, keep-alive, restore, re-check.

A thin composition: loading settings and the loaded state (core/loading.py), measured choices
(core/tuner.py), memory admission (core/memory.py), naming (core/naming.py) and the records kept
across restarts (core/load_records.py). Loads run on the engine's worker thread, between
generations, so a switch never races a request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from edgellm.common.errors import EdgeError, Unavailable
from edgellm.common.logs import get_logger
from edgellm.common.runtime import Runtime
from edgellm.device.config import DaemonConfig
from edgellm.device.core import loading, memory
from edgellm.device.core.autotune import ThreadTuning
from edgellm.device.core.load_records import LoadRecords, same_load
from edgellm.device.core.loading import EngineFactory, Loaded, LoadUnderway, check_forward
from edgellm.device.core.naming import check_named, resolve_name
from edgellm.device.core.state import EngineState, LoadInfo
from edgellm.device.core.tuner import Tuner
from edgellm.device.store import ArtifactStore
from edgellm.device.worker import EngineWorker
from edgellm.engine.artifact import Artifact, open_artifact
from edgellm.engine.base import Engine
from edgellm.engine.config import EngineConfig
from edgellm.engine.costs import ForwardCosts
from edgellm.engine.kv_cache import KvCache
from edgellm.engine.kv_window import WindowPolicy

log = get_logger(__name__)


class ModelLifecycle:
    """Owns which model is loaded (`loaded`, `state`) and the settings the next load uses (`config`)."""

    def __init__(
        self,
        config: DaemonConfig,
        worker: EngineWorker,
        store: ArtifactStore,
        engine_factory: EngineFactory,
        on_threads: Callable[[int], None] = lambda threads: None,
    ) -> None:
        """`on_threads` hears each autotuned thread count (the governor's ladder starts from it)."""
        self.config = config
        self.worker = worker
        self.store = store
        self.engine_factory = engine_factory
        self.loaded: Loaded | None = None
        self.kv_mode = 0  # the loaded model's MNN attention_mode (its KV bytes per token)
        self.loading: LoadUnderway | None = None  # set on the event loop for the whole of load()
        self.load_waiters = 0  # requests waiting for it (the startup race: they wait, not fail)
        self.state = EngineState.EMPTY  # EMPTY, LOADING or IDLE; the scheduler reports its own phases
        self.last_used = time.monotonic()
        self._listeners: list[Callable[[bool], None]] = []
        self.tuner = Tuner(config.engine.threads, config.store.data_dir, engine_factory)
        self.records = LoadRecords(config.store.data_dir, store.artifacts)
        self.on_threads = on_threads

    @property
    def tuning(self) -> ThreadTuning:
        """The thread count in use and how it was chosen."""
        return self.tuner.tuning

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
        self.tuner.loaded(loaded.cache.costs)
        if not self.tuning.pinned:
            self.on_threads(self.tuning.threads)  # on the event loop, where the governor lives
        self.last_used = time.monotonic()
        self.records.remember(loaded.artifact)
        self._notify(True)
        return loaded.info

    async def _load_checked(self, path: Path, underway: LoadUnderway) -> Loaded:
        artifact = await asyncio.to_thread(self._open_checked, path)
        underway.name = artifact.name
        engine_config = self.engine_config(artifact.runtime)
        freed = self.loaded.artifact.size_bytes if self.loaded is not None else 0
        memory.check_memory(self.config, artifact, engine_config.attention_mode, freed)
        self.records.mark_loading(artifact)
        self.tuner.starting_load()
        try:
            return await asyncio.wrap_future(self.worker.call(lambda: self._load(artifact, engine_config)))
        finally:
            self.records.clear_loading()

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
        return self.records.crashed_last_load()

    def _load(self, artifact: Artifact, engine_config: EngineConfig) -> Loaded:
        """On the worker thread: free the old engine, then build, load and warm up the new one."""
        self.state = EngineState.LOADING
        old, self.loaded = self.loaded, None
        if old is not None:
            old.engine.close()
        try:
            engine_config = self._threads(artifact, engine_config)
            engine = self.engine_factory(artifact, engine_config)
            engine.load()
            policy = self.window_policy()
            policy.validate(engine.context_length)
            costs = self._warm_up(artifact, engine, engine_config, policy)
        except BaseException:
            self.state = EngineState.EMPTY
            raise
        cache = KvCache(
            engine,
            policy,
            engine.special_id("<|im_start|>"),
            engine.special_id("<|im_end|>"),
            can_grow=lambda extra: memory.can_hold_kv(
                self.config, artifact, extra, engine_config.attention_mode
            ),
            costs=costs,
        )
        info = LoadInfo(artifact, engine.context_length, engine.load_ms, engine.warmup_ms)
        self.loaded = Loaded(info, engine, cache)
        self.kv_mode = engine_config.attention_mode
        self.state = EngineState.IDLE
        return self.loaded

    def _threads(self, artifact: Artifact, engine_config: EngineConfig) -> EngineConfig:
        """With autotune on, the measured thread count (which the settings then show)."""
        if not self.config.engine.autotune:
            return engine_config
        engine_config = self.tuner.threads_for(artifact, engine_config)
        self.config = self.config.with_settings(threads=engine_config.threads)
        return engine_config

    def _warm_up(
        self, artifact: Artifact, engine: Engine, engine_config: EngineConfig, policy: WindowPolicy
    ) -> ForwardCosts:
        """Warm up (and time the forward costs), or with --no-warmup only check one forward."""
        if not self.config.engine.warmup:
            check_forward(engine)
            return ForwardCosts()
        engine.warm_up(loading.warmup_tokens(self.config, policy, engine.context_length))
        # Timed for the rate watch (core/retune.py) and telemetry only: the draft policy prices
        # verifies by the engine's fixed `draft_costs`, so these timings never change tokens.
        return self.tuner.forward_costs(artifact, engine, engine_config)

    # -- re-checking measured choices (core/retune.py) ----------------------------------------------
    def observe_rate(self, decode_tps: float, tokens: int, throttled: bool, constrained: bool) -> None:
        """A finished request's decode rate (worker thread): flag a re-check when it disagrees."""
        self.tuner.observe_rate(decode_tps, tokens, throttled, constrained)

    @property
    def retune_due(self) -> bool:
        """Whether a re-check waits for an idle moment (and the per-artifact limit allows one)."""
        return self.loaded is not None and self.tuner.retune_due

    async def retune(self) -> LoadInfo | None:
        """Reload the loaded artifact measuring afresh (threads and forward costs), saving clean results.

        Call only while idle: the model is reloaded, so a request arriving meanwhile waits for it.
        """
        loaded = self.loaded
        if loaded is None:
            return None
        with self.tuner.measuring_afresh():
            return await self.load(loaded.artifact.path)

    def pin_threads(self, threads: int) -> None:
        """An explicit thread count (UpdateConfig): no more autotune until restart."""
        self.config = self.config.with_settings(threads=threads, autotune=False)
        self.tuner.pin(threads)

    async def resume_autotune(self, threads: int) -> None:
        """Autotune again after a pinned count (`config reset`); THREADS stays the fallback.

        A loaded model is reloaded: MNN reads its thread count only at load.
        """
        self.config = self.config.with_settings(threads=threads, autotune=True)
        self.tuner.unpin()
        if self.loaded is not None:
            await self.load(self.loaded.artifact.path)

    async def unload(self, forget: bool = True) -> None:
        """Unload the model (waits for the running generation to finish)."""
        await asyncio.wrap_future(self.worker.call(self.close))
        if forget:
            self.records.remember(None)
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
        return loading.engine_config(self.config, runtime)

    def check_window(self, window: int) -> None:
        """Refuse (ResourceExhausted) a KV window the loaded model's cache cannot fill in MemAvailable."""
        loaded = self.loaded
        if loaded is not None and window:
            held = len(loaded.engine.history)
            memory.check_window(self.config, loaded.artifact, self.kv_mode, window, held)

    def window_policy(self) -> WindowPolicy:
        """The daemon's sliding-window policy."""
        return loading.window_policy(self.config)

    # -- naming models -----------------------------------------------------------------------------
    def require_loaded(self, name: str = "") -> Loaded:
        """The loaded model, checking that a request's `model` (name, id or id prefix) names it."""
        loaded = self.loaded
        check_named(loaded.artifact if loaded is not None else None, name)
        assert loaded is not None  # check_named refused None
        return loaded

    def is_loaded(self, artifact_id: str) -> bool:
        """Whether the artifact with this id is the loaded one."""
        return self.loaded is not None and self.loaded.artifact.artifact_id == artifact_id

    def resolve(self, name: str) -> Path:
        """A LoadModel name: installed artifact (id, prefix, name), a loaded-before directory, or a path."""
        return resolve_name(name, self.store, self.directories(), self.config.engine.allow_dir_load)

    def directories(self) -> list[Artifact]:
        """Artifact directories loaded from outside the store that still open (ListModels shows them)."""
        return self.records.directories()

    # -- memory across restarts --------------------------------------------------------------------
    async def restore(self) -> LoadInfo | None:
        """Reload the model loaded before the last shutdown, if any (a failure is logged, not fatal)."""
        crashed = self.crashed_last_load()
        record = self.records.last_loaded()
        if record is None:
            return None
        if crashed is not None and same_load(
            crashed, Path(str(record.get("path"))), record.get("artifact_id")
        ):
            log.warning("restore_skipped", record=record, reason="its load crashed the daemon last time")
            return None
        try:
            info = await self.load(Path(str(record["path"])))
        except (EdgeError, OSError, KeyError) as err:
            log.warning("restore_failed", record=record, error=str(err))
            return None
        log.info("model_restored", artifact_id=info.artifact.artifact_id[:12], load_ms=round(info.load_ms, 1))
        return info

    async def keep_alive(self, busy: Callable[[], bool]) -> None:
        """Unload the model after keep_alive_s idle seconds (run as a task; 0 = never)."""
        ttl = self.config.engine.keep_alive_s
        if ttl <= 0:
            return
        while True:
            await asyncio.sleep(min(ttl / 4, 5.0))
            idle = time.monotonic() - self.last_used
            if self.loaded is not None and self.state == EngineState.IDLE and not busy() and idle > ttl:
                log.info("idle_unload", idle_s=round(idle, 1))
                await self.unload(forget=False)
