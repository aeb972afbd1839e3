"""The daemon's plain-Python core: the narrow surface the RPC layer calls, over models and generation.

`DaemonCore` wires the parts (worker thread, model lifecycle, scheduler, store, governor) and
answers in domain types (`DaemonState`, `LoadInfo`, events); it knows nothing of gRPC.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

from edgellm.common.allocator import release_free_memory
from edgellm.common.errors import EdgeError, FailedPrecondition, InvalidArgument
from edgellm.common.logs import get_logger
from edgellm.common.push_wire import PushMessage
from edgellm.device.config import DaemonConfig, check_setting
from edgellm.device.core.load_records import same_load
from edgellm.device.core.loading import EngineFactory
from edgellm.device.core.models import ModelLifecycle
from edgellm.device.core.reset import changes, settings_view
from edgellm.device.core.saved_settings import SavedSettings, describe_overrides, overridden_by
from edgellm.device.core.scheduler import Scheduler, load_wait_s
from edgellm.device.core.state import (
    ConfigUpdate,
    DaemonState,
    EngineState,
    LoadInfo,
    ModelEntry,
    SettingRestore,
    TelemetryFrame,
)
from edgellm.device.generation import Event, GenerationJob
from edgellm.device.governor.capacity import CapacityConfig
from edgellm.device.governor.controller import GovernorConfig
from edgellm.device.governor.platform import Platform, phone_platform
from edgellm.device.governor.runtime import GovernorRuntime
from edgellm.device.push import PushReceiver, PushResult, ReadyFn
from edgellm.device.store import ArtifactStore, StoreStatus, parse_manifest
from edgellm.device.store.store import check_artifact_id, default_limits
from edgellm.device.telemetry.shared import MIN_TELEMETRY_INTERVAL_MS, SharedReading
from edgellm.device.worker import EngineWorker
from edgellm.engine.mnn import MnnEngine

log = get_logger(__name__)

VERSION = "0.1.0"
# Why 8192: with no model loaded, UpdateConfig checks a new window against the default model's
# trained context (SmolLM2); the next LoadModel checks it again against the real one.
CONTEXT_WITHOUT_MODEL = 8192
_FULL_ID = re.compile(r"[0-9a-f]{64}")
# A re-check of a stale measured choice (core/retune.py) waits until no request ran for this long:
# it reloads the model, so it should not land between two turns of a conversation.
RETUNE_IDLE_S = 30.0


def _phone(config: DaemonConfig) -> Platform:
    """The real phone under config's roots: the platform when the caller chose none."""
    if config.governor.virtual_phone:
        # The daemon cannot build a simulated phone (edgellm.sim sits above it): its caller must.
        raise InvalidArgument(
            "a virtual phone is a platform the caller passes in: edgellm.platforms.choose_platform(config)"
        )
    return phone_platform(config.governor.sysfs_root, config.governor.proc_root)


class DaemonCore:
    """Owns the engine (through the worker thread), the artifact store and the governor.

    `platform` is the phone the governor reads and drives, chosen by the caller (`edgellm.platforms`);
    without one, the real phone under config.governor.sysfs_root and proc_root.
    """

    def __init__(
        self,
        config: DaemonConfig,
        engine_factory: EngineFactory = MnnEngine,
        platform: Platform | None = None,
    ) -> None:
        self.started = time.time()
        self.startup = config  # what `config reset` puts back (the command line's, else the defaults)
        self.worker = EngineWorker(config.server.queue_size, on_idle=release_free_memory)
        root = config.store.data_dir / "store"
        quota, reserve = default_limits(root, config.store.store_quota_bytes, config.store.disk_reserve_bytes)
        self.store = ArtifactStore(root, quota_bytes=quota, disk_reserve_bytes=reserve)
        log.info("store_limits", quota_bytes=quota, disk_reserve_bytes=reserve)
        platform = platform if platform is not None else _phone(config)
        self.governor = GovernorRuntime(
            threads=config.engine.threads,
            config=GovernorConfig(
                policy=config.governor.governor_policy,
                setpoint_c=config.governor.setpoint_c,
                thermal_policy=config.governor.thermal_policy,
            ),
            platform=platform,
            period_s=config.governor.governor_period_s,
            capacity=CapacityConfig(floor_tokens_per_second=config.governor.capacity_floor),
        )
        # Every telemetry stream shares one sensor read per minimum interval (50 ms).
        self.readings = SharedReading(platform.telemetry.read, MIN_TELEMETRY_INTERVAL_MS / 1000)
        self.models = ModelLifecycle(
            config, self.worker, self.store, engine_factory, on_threads=self.governor.set_threads
        )
        self.scheduler = Scheduler(self.models, self.worker, self.governor)
        self._pushes = PushReceiver(self.store)
        self.retune_idle_s = RETUNE_IDLE_S
        self._retune_task: asyncio.Task[None] | None = None
        self.saved = SavedSettings(config.store.data_dir)

    @property
    def config(self) -> DaemonConfig:
        """The settings in force (UpdateConfig replaces threads, kv_window and n_keep)."""
        return self.models.config

    def on_model_change(self, callback: Callable[[bool], None]) -> None:
        """Register a callback told True when a model is loaded, False when none is."""
        self.models.on_change(callback)

    def start(self) -> None:
        """Start the background loops (the governor, idle re-checks) on the running event loop."""
        self.governor.start()
        self._retune_task = asyncio.get_running_loop().create_task(self.retune_when_idle())

    async def close(self) -> None:
        """Let cancelled pushes finish writing, stop the governor and the worker, then free the engine."""
        await self._pushes.drain()
        if self._retune_task is not None:
            self._retune_task.cancel()
        await self.governor.stop()
        await asyncio.get_running_loop().run_in_executor(None, self.worker.stop)
        self.models.close()

    # -- models ------------------------------------------------------------------------------------
    async def load(self, path: Path) -> LoadInfo:
        """Load an artifact directory (admission-checked) and warm it up, replacing any loaded model."""
        return await self.models.load(path)

    async def load_at_start(self, model: Path) -> LoadInfo | None:
        """`edgellm daemon --model`: a directory, else an installed artifact's id, prefix or name.

        If the last load of that artifact crashed the daemon (its "loading" marker survived), it is
        not loaded again: the daemon serves NOT_SERVING and says so, rather than crash-looping.
        """
        crashed = self.models.crashed_last_load()
        if (model / "manifest.json").is_file():
            path = model
        else:
            path = await asyncio.to_thread(self.store.resolve_dir, str(model))
        if crashed is not None and same_load(crashed, path):
            log.error("start_model_skipped", model=str(model), reason="its last load crashed the daemon")
            return None
        return await self.models.load(path)

    async def load_model(self, name: str) -> LoadInfo:
        """LoadModel: an installed artifact (id, prefix or name), a directory loaded before, or a path."""
        path = await asyncio.to_thread(self.models.resolve, name)  # parses manifests: off the loop
        return await self.models.load(path)

    async def unload(self, forget: bool = True) -> None:
        """Unload the model; with forget, a restart will not reload it."""
        await self.models.unload(forget)

    async def restore(self) -> LoadInfo | None:
        """Reload the model loaded before the last shutdown, if any."""
        return await self.models.restore()

    async def retune_when_idle(self) -> None:
        """Re-measure a stale or contended choice once idle (no request for retune_idle_s); a task."""
        while True:
            await asyncio.sleep(max(0.01, min(self.retune_idle_s / 4, 5.0)))
            m = self.models
            idle = time.monotonic() - m.last_used
            if (
                not m.retune_due
                or m.state != EngineState.IDLE
                or self.scheduler.busy
                or idle < self.retune_idle_s
            ):
                continue
            log.info("retune_start", reason=m.tuning.recheck, idle_s=round(idle, 1))
            try:
                await m.retune()
            except (EdgeError, OSError) as err:  # the next idle moment tries again (MAX_RETUNES)
                log.warning("retune_failed", error=str(err))

    async def keep_alive(self) -> None:
        """Unload after config.engine.keep_alive_s idle seconds (run as a task)."""
        await self.models.keep_alive(lambda: self.scheduler.busy)

    def list_models(self) -> list[ModelEntry]:
        """Installed artifacts, then directories loaded from outside the store, then the loaded one."""
        arts = self.store.installed()
        seen = {a.artifact_id for a in arts}
        for art in self.models.directories():
            if art.artifact_id not in seen:
                arts.append(art)
                seen.add(art.artifact_id)
        loaded = self.models.loaded
        if loaded is not None and loaded.artifact.artifact_id not in seen:
            arts.append(loaded.artifact)
        return [ModelEntry(a, self.models.is_loaded(a.artifact_id)) for a in arts]

    # -- generation --------------------------------------------------------------------------------
    def generate(
        self, job: GenerationJob, model: str = "", time_remaining: float | None = None
    ) -> AsyncIterator[Event]:
        """Queue a generation for the loaded model (`model`, if given, must name it) and stream its events.

        A model that is loading is waited for, within the call's time_remaining (its deadline).
        """
        return self.scheduler.generate(job, model, load_wait_s(time_remaining))

    def cancel(self, request_id: str) -> bool:
        """Cancel a running or queued request by id."""
        return self.scheduler.cancel(request_id)

    # -- state and control -------------------------------------------------------------------------
    @property
    def engine_state(self) -> EngineState:
        """What the engine is doing now (LOADING from the first hash check of a load to its end)."""
        if self.scheduler.phase is None and self.models.loading is not None:
            return EngineState.LOADING
        return self.scheduler.phase or self.models.state

    def status(self) -> DaemonState:
        """GetStatus."""
        c = self.config
        loaded = self.models.loaded
        return DaemonState(
            version=VERSION,
            engine_state=self.engine_state,
            model=loaded.info if loaded is not None else None,
            threads=c.engine.threads,
            queue_depth=self.worker.depth,
            queue_capacity=self.worker.capacity,
            max_new_tokens_cap=c.server.max_new_tokens_cap,
            requests_served=self.scheduler.requests_served,
            uptime_seconds=time.time() - self.started,
            kv_window=c.kv.kv_window,
            n_keep=c.kv.n_keep,
            governor=self.governor.snapshot(),
            thread_tuning=self.models.tuning,
            draft_tokens_total=self.scheduler.draft_tokens_total,
            accepted_draft_tokens_total=self.scheduler.accepted_draft_tokens_total,
        )

    async def telemetry(self) -> TelemetryFrame:
        """One telemetry sample (the OS readers run off the event loop)."""
        gov = self.governor
        live = gov.tokens_per_second()
        reading = await self.readings.get()
        state = self.engine_state
        generating = state in (EngineState.PREFILL, EngineState.DECODE)
        return TelemetryFrame(
            reading=reading,
            governor=gov.snapshot(),
            engine_state=state,
            tokens_per_second=live if generating else self.scheduler.last_decode_tps,
            last_ttft_ms=self.scheduler.last_ttft_ms,
            kv_tokens=self.kv_tokens,
            throttled_seconds=gov.throttled_seconds,
            draft_tokens_total=self.scheduler.draft_tokens_total,
            accepted_draft_tokens_total=self.scheduler.accepted_draft_tokens_total,
            evicted_tokens_total=self.scheduler.evicted_tokens_total,
        )

    @property
    def kv_tokens(self) -> int:
        """Tokens the engine's KV cache holds now (0 without a model)."""
        loaded = self.models.loaded
        return len(loaded.engine.history) if loaded is not None else 0

    async def update(self, change: ConfigUpdate) -> tuple[SettingRestore, ...]:
        """UpdateConfig: validate every field first (nothing changes on INVALID_ARGUMENT), then apply,
        and save the fields given for restarts (`<data_dir>/settings.json`).

        forget_saved forgets the file and puts back the startup values first (`restore_startup`,
        whose report this returns); the fields given are then checked again, against those values.
        A new thread count reloads the model: MNN reads thread_num only in initRuntime(), which
        only load() runs.
        """
        self._validate(change)
        restored: tuple[SettingRestore, ...] = ()
        if change.forget_saved:
            self.saved.forget()
            restored = await self.restore_startup()
            self._validate(change)
        self.saved.add(change)
        await self._apply(change)
        return restored

    async def restore_startup(self) -> tuple[SettingRestore, ...]:
        """Put back the values the daemon started with; report each setting that changed or could not.

        A startup window the daemon now refuses (MemAvailable fell, or the loaded model's context
        is shorter than the start-up one's) stays as it is, with the reason; so does a thread count
        whose reload failed.
        """
        before = settings_view(self.status(), self.config.engine.autotune)
        refused: dict[str, str] = {}
        start = {k: self.startup.setting(k) for k in ("kv_window", "n_keep")}  # checked as a pair
        differ = [k for k, v in start.items() if v != self.config.setting(k)]
        if differ:
            try:
                self._validate(ConfigUpdate(**start))
                self.models.config = self.config.with_settings(**start)
            except EdgeError as err:
                refused.update(dict.fromkeys(differ, str(err)))
        self.governor.reset()
        try:
            await self._restore_threads()
        except (EdgeError, OSError) as err:
            refused["threads"] = f"reloading the model failed: {err}"
        restored = changes(before, settings_view(self.status(), self.config.engine.autotune), refused)
        log.info("startup_settings_restored", changes=[f"{r.name}: {r.was} -> {r.now}" for r in restored])
        return restored

    async def _restore_threads(self) -> None:
        start = self.startup.engine
        if start.autotune and not self.config.engine.autotune:
            await self.models.resume_autotune(start.threads)
        elif not start.autotune and start.threads != self.config.engine.threads:
            await self._apply(ConfigUpdate(threads=start.threads))

    async def apply_saved(self) -> None:
        """At start, after the model is loaded: the settings `config set` saved before a restart.

        A flag given on the command line wins over a saved value (logged as overridden). Saved
        settings that the daemon now refuses (a window larger than a new model's context, a cluster
        this phone lacks) are logged and left out, not fatal: the daemon still serves.
        """
        saved = self.saved.read()
        over = overridden_by(saved, self.startup.explicit)
        if over:
            log.info(
                "saved_settings_overridden",
                path=str(self.saved.path),
                settings=describe_overrides(saved, over, self.startup),
            )
        fields = {k: v for k, v in saved.items() if k not in over}
        change = self.saved.load(fields)
        if change is None:
            return
        try:
            self._validate(change)
        except EdgeError as err:
            log.warning("saved_settings_refused", path=str(self.saved.path), reason=str(err))
            return
        await self._apply(change)
        log.info("saved_settings_applied", path=str(self.saved.path), settings=fields)

    async def _apply(self, change: ConfigUpdate) -> None:
        c = self.config
        window = change.kv_window if change.kv_window is not None else c.kv.kv_window
        keep = change.n_keep if change.n_keep is not None else c.kv.n_keep
        self.models.config = c.with_settings(kv_window=window, n_keep=keep)
        self.governor.update(change.governor)
        if change.threads is None or change.threads == c.engine.threads:
            return
        self.models.pin_threads(change.threads)
        self.governor.set_threads(change.threads)
        loaded = self.models.loaded
        if loaded is not None:
            start = time.perf_counter()
            await self.models.load(loaded.artifact.path)
            reload_ms = round((time.perf_counter() - start) * 1000, 1)
            log.info("threads_reloaded", threads=change.threads, reload_ms=reload_ms)

    def _validate(self, change: ConfigUpdate) -> None:
        # Each value by its flag's own type first (the limits written once, in device/config.py).
        for name, value in change.settings().items():
            check_setting(name, value)
        cpus = max(os.cpu_count() or 1, len(self.governor.allowed_cpus))
        if change.threads is not None and change.threads > cpus:
            raise InvalidArgument(f"threads must be within 1..{cpus}, not {change.threads}")
        window = change.kv_window if change.kv_window is not None else self.config.kv.kv_window
        keep = change.n_keep if change.n_keep is not None else self.config.kv.n_keep
        loaded = self.models.loaded
        context = loaded.info.context_length if loaded is not None else CONTEXT_WITHOUT_MODEL
        # The same rules as at start-up (minimum window, n_keep below half of it, room for a chunk).
        replace(self.models.window_policy(), window=window, n_keep=keep).validate(context)
        if change.kv_window:  # a larger window must fit MemAvailable before anything changes
            self.models.check_window(change.kv_window)
        self.governor.validate(change.governor)

    # -- artifacts ---------------------------------------------------------------------------------
    async def artifact_status(self, manifest_json: str = "", artifact_id: str = "") -> StoreStatus:
        """What the device holds of an artifact (for resume), by its manifest or by an id it knows."""
        if manifest_json:
            # Both off the event loop (S22): parsing a manifest of up to 1 MiB takes milliseconds.
            manifest = await asyncio.to_thread(parse_manifest, manifest_json)
            return await asyncio.to_thread(self.store.status, manifest)
        if artifact_id:
            check_artifact_id(artifact_id)
            manifest = await asyncio.to_thread(self.store.known_manifest, artifact_id)
            return await asyncio.to_thread(self.store.status, manifest)
        raise InvalidArgument("give manifest_json or artifact_id")

    async def delete_artifact(self, name: str) -> None:
        """Delete an installed artifact of any schema (unreadable too) and any staged push of it.

        A full id deletes a staged-only push too (S9); a prefix or name must name an installed
        artifact. The loaded one is refused. Store work runs off the event loop (S22).
        """
        if not name:
            raise InvalidArgument("artifact_id is required (an id, an 8+ digit prefix or a name)")
        if _FULL_ID.fullmatch(name):
            artifact_id = name
        else:
            artifact_id = (await asyncio.to_thread(self.store.resolve_dir, name)).name
        if self.models.is_loaded(artifact_id):
            raise FailedPrecondition(f"artifact {artifact_id[:12]} is loaded; unload it first")
        await asyncio.to_thread(self.store.delete, artifact_id)

    async def list_models_async(self) -> list[ModelEntry]:
        """list_models off the event loop (it parses every installed manifest)."""
        return await asyncio.to_thread(self.list_models)

    async def push(self, messages: AsyncIterator[PushMessage], ready: ReadyFn | None = None) -> PushResult:
        """Receive a pushed artifact into the store (see edgellm.device.push)."""
        return await self._pushes.receive(messages, ready)

    def is_loaded(self, artifact_id: str) -> bool:
        """Whether the artifact with this id is the loaded one."""
        return self.models.is_loaded(artifact_id)
