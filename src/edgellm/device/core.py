"""The daemon's plain-Python core: model lifecycle, the worker, request accounting."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.errors import EdgeError, FailedPrecondition, NotFound
from edgellm.common.logs import get_logger
from edgellm.common.runtime import KV_CACHE_MODES, Runtime, kv_cache_mode, kv_cache_name
from edgellm.device.admission import admit, kv_bytes, memory_need
from edgellm.device.artifact import Artifact, open_artifact
from edgellm.device.config import DaemonConfig
from edgellm.device.engine import EngineConfig, MnnEngine
from edgellm.device.generation import Event, Finished, GenerationJob, run_generation
from edgellm.device.governor.controller import GovernorConfig
from edgellm.device.governor.runtime import GovernorRuntime
from edgellm.device.kv_cache import KvCache
from edgellm.device.kv_window import WindowPolicy
from edgellm.device.store import ArtifactStore
from edgellm.device.telemetry.process import read_meminfo
from edgellm.device.worker import EngineWorker, Ticket

log = get_logger(__name__)

VERSION = "0.1.0"
# Longest the engine waits for a streamed token to reach gRPC before computing the next one.
DELIVERY_WAIT_S = 0.02


@dataclass(frozen=True)
class LoadInfo:
    """What a load measured."""

    artifact: Artifact
    load_ms: float
    warmup_ms: float


class DaemonCore:
    """Owns the engine (through the worker thread) and serves generations."""

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.worker = EngineWorker(config.queue_size)
        self.engine: MnnEngine | None = None
        self.cache: KvCache | None = None  # the engine's KV contents (window, session reuse)
        self.state = "empty"  # empty | loading | idle | prefill | decode
        self.started = time.time()
        self.requests_served = 0
        self.last_ttft_ms = 0.0
        self.last_decode_tps = 0.0
        self.threads = config.threads
        self._on_model_change: list[Callable[[bool], None]] = []
        self.store = ArtifactStore(
            config.data_dir / "store",
            quota_bytes=config.store_quota_bytes,
            disk_reserve_bytes=config.disk_reserve_bytes,
        )
        self.last_used = time.monotonic()
        self.governor = GovernorRuntime(
            threads=config.threads,
            config=GovernorConfig(policy=config.governor_policy, setpoint_c=config.setpoint_c),
            sysfs_root=config.sysfs_root,
            proc_root=config.proc_root,
            virtual_phone=config.virtual_phone,
            virtual_root=config.data_dir / "virtual-phone",
            time_scale=config.virtual_phone_time_scale,
            period_s=config.governor_period_s,
        )

    def on_model_change(self, callback: Callable[[bool], None]) -> None:
        """Register a callback told True when a model is loaded, False when none is."""
        self._on_model_change.append(callback)

    # -- model lifecycle ---------------------------------------------------------------------------
    async def load(self, path: Path) -> LoadInfo:
        """Load an artifact on the worker thread (replacing any loaded one) and warm it up."""
        artifact = open_artifact(path)
        config = self.engine_config(artifact.runtime)
        self.check_memory(artifact, config.attention_mode)

        def _load() -> LoadInfo:
            self.state = "loading"
            old, self.engine, self.cache = self.engine, None, None
            if old is not None:
                old.close()
            try:
                engine = MnnEngine(artifact, config)
                engine.load()
                policy = self.window_policy()
                policy.validate(engine.context_length)
                if self.config.warmup:
                    engine.warm_up(self.warmup_tokens(policy, engine.context_length))
            except BaseException:
                self.state = "empty"
                raise
            self.engine = engine
            self.cache = KvCache(
                engine,
                policy,
                engine.special_id("<|im_start|>"),
                engine.special_id("<|im_end|>"),
                can_grow=lambda extra: self.can_hold_kv(artifact, extra, config.attention_mode),
            )
            self.state = "idle"
            return LoadInfo(artifact, engine.load_ms, engine.warmup_ms)

        info = await asyncio.wrap_future(self.worker.call(_load))
        self.last_used = time.monotonic()
        self._remember(artifact)
        self._notify(True)
        return info

    def engine_config(self, runtime: Runtime) -> EngineConfig:
        """Runtime settings for an artifact: its own, with the daemon's --kv-quant (if set) over them."""
        mode = runtime.attention_mode
        if self.config.kv_quant is not None:
            mode = kv_cache_mode(self.config.kv_quant)
            if mode != runtime.attention_mode:
                # The daemon's flag wins over what the artifact was built with: say so, once per load.
                log.info(
                    "runtime_override",
                    key="attention_mode",
                    artifact=runtime.attention_mode,
                    daemon=mode,
                    reason="edgellm daemon --kv-quant",
                )
        if mode != KV_CACHE_MODES["fp"]:
            if self.config.kv_window and self.config.kv_method == "erase":
                # Why refuse: with quantized KV, mnn 3.6.1's erase keeps nothing after the erased
                # range (CPUKVCacheManager::onRealloc) while positions count on: silent garbage.
                raise FailedPrecondition(
                    f"KV cache {kv_cache_name(mode)} cannot slide the window by erase: MNN 3.6.1 drops "
                    "every cached token after an erased range when the KV cache is quantized "
                    "(docs/engine.md); use --kv-method reprefill or --kv-quant fp"
                )
            # Measured with mnn 3.6.1 (docs/engine.md): INT8 keys are stored relative to a running
            # max that moves between forwards and is never added back, so chunked prefills take
            # SmolLM2's wikitext-2 perplexity from 10.98 to ~32. Check a device's figure with
            # bench/bench_kv.py before relying on it.
            log.warning("kv_int8_lossy", attention_mode=mode, measured_ppl_fp=10.98, measured_ppl_int8=32.1)
        return EngineConfig(
            threads=self.threads,
            precision=runtime.precision,
            memory=runtime.memory,
            dynamic_option=runtime.dynamic_option,
            attention_mode=mode,
        )

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

    def can_hold_kv(self, artifact: Artifact, extra_tokens: int, attention_mode: int) -> bool:
        """Whether MemAvailable covers `extra_tokens` more KV positions plus the margin."""
        need = kv_bytes(artifact, extra_tokens, attention_mode) + self.config.memory_margin_bytes
        return read_meminfo(self.config.proc_root).available_bytes >= need

    def request_policy(self, job: GenerationJob, context_length: int) -> WindowPolicy:
        """The daemon's window policy with the request's kv_window / n_keep, validated."""
        policy = self.window_policy()
        if job.kv_window or job.n_keep:
            policy = WindowPolicy(
                window=job.kv_window or policy.window,
                n_keep=job.n_keep or policy.n_keep,
                chunk=0 if job.kv_window else policy.chunk,
                method=policy.method,
                tiers=policy.tiers if not job.kv_window else (),
            )
        policy.validate(context_length)
        return policy

    # -- artifacts, memory admission, restart memory (issue 4) -------------------------------------
    def resolve_artifact(self, name: str) -> Path:
        """A LoadModel name: installed artifact id/prefix/name, or an artifact directory on the device."""
        if not name:
            raise FailedPrecondition("name the model to load: an artifact id, its name, or a directory")
        with contextlib.suppress(NotFound):
            return self.store.resolve(name).path
        if "/" in name and Path(name).is_dir():
            return Path(name)
        raise NotFound(f"no installed artifact or artifact directory called {name!r} (see `edgellm models`)")

    def check_memory(self, artifact: Artifact, attention_mode: int) -> None:
        """Refuse (ResourceExhausted) a model that MemAvailable cannot hold with its KV budget."""
        c = self.config
        need = memory_need(artifact, c.kv_window or c.kv_budget_tokens, c.memory_margin_bytes, attention_mode)
        freed = self.engine.artifact.size_bytes if self.engine is not None else 0
        admit(need, read_meminfo(c.proc_root), freed)

    @property
    def _remembered(self) -> Path:
        return self.config.data_dir / "loaded.json"

    def _remember(self, artifact: Artifact | None) -> None:
        if artifact is None:
            self._remembered.unlink(missing_ok=True)
            return
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._remembered.with_suffix(".tmp")
        tmp.write_text(json.dumps({"path": str(artifact.path), "artifact_id": artifact.artifact_id}))
        tmp.replace(self._remembered)

    async def restore(self) -> LoadInfo | None:
        """Reload the model loaded before the last shutdown, if any (a failure is logged, not fatal)."""
        try:
            record = json.loads(self._remembered.read_text())
        except (OSError, ValueError):
            return None
        try:
            info = await self.load(Path(record["path"]))
        except (EdgeError, OSError, KeyError) as err:
            log.warning("restore_failed", record=record, error=str(err))
            return None
        log.info("model_restored", artifact_id=info.artifact.artifact_id[:12], load_ms=round(info.load_ms, 1))
        return info

    async def keep_alive(self) -> None:
        """Unload the model after config.keep_alive_s idle seconds (run as a task; 0 = never)."""
        ttl = self.config.keep_alive_s
        if ttl <= 0:
            return
        while True:
            await asyncio.sleep(min(ttl / 4, 5.0))
            idle = time.monotonic() - self.last_used
            if self.engine is not None and self.state == "idle" and self.worker.depth == 0 and idle > ttl:
                log.info("idle_unload", idle_s=round(idle, 1))
                await self.unload(forget=False)

    async def unload(self, forget: bool = True) -> None:
        """Unload the model (waits for the running generation to finish)."""

        def _unload() -> None:
            if self.engine is not None:
                self.engine.close()
            self.engine, self.cache = None, None
            self.state = "empty"

        await asyncio.wrap_future(self.worker.call(_unload))
        if forget:
            self._remember(None)
        self._notify(False)

    def _notify(self, loaded: bool) -> None:
        for cb in self._on_model_change:
            cb(loaded)

    def resolve_model(self, name: str) -> None:
        """Check that a request's `model` names the loaded one (id, id prefix, or name)."""
        engine = self.engine
        if engine is None:
            raise FailedPrecondition(
                "no model is loaded; load one with `edgellm load` or start the daemon with --model"
            )
        if not name:
            return
        art = engine.artifact
        if name == art.name or (len(name) >= 8 and art.artifact_id.startswith(name)):
            return
        raise NotFound(f"model {name!r} is not loaded (loaded: {art.name} {art.artifact_id[:12]})")

    # -- generation --------------------------------------------------------------------------------
    async def generate(self, job: GenerationJob) -> AsyncIterator[Event]:
        """Queue job and yield its events; cancelling the iterator stops the engine within a token."""
        self.resolve_model("")
        ticket = Ticket(
            request_id=job.request_id or uuid.uuid4().hex,
            run=lambda t: self._run(job, t),
            loop=asyncio.get_running_loop(),
        )
        self.worker.submit(ticket)
        try:
            async for event in ticket.stream():
                yield event
        finally:
            ticket.cancel()

    def _run(self, job: GenerationJob, ticket: Ticket) -> None:
        cache = self.cache
        if cache is None:
            raise FailedPrecondition("the model was unloaded while this request waited")
        cache.policy = self.request_policy(job, cache.engine.context_length)
        self.state = "prefill"

        def emit(event: Event) -> None:
            if self.state == "prefill":
                # The first token sets TTFT: let it reach gRPC before the next forward takes
                # every core; later tokens stream while the engine computes.
                self.state = "decode"
                ticket.emit_and_wait(event, DELIVERY_WAIT_S)
            else:
                ticket.emit(event)

        actuators = self.governor.actuators
        actuators.before_prefill()
        self.governor.busy = True
        try:
            finished: Finished = run_generation(
                cache, job, emit, ticket.cancelled, between_tokens=actuators.between_tokens
            )
        finally:
            self.governor.busy = False
            self.state = "idle" if self.engine is not None else "empty"
        self.requests_served += 1
        self.last_used = time.monotonic()
        self.last_ttft_ms = finished.stats.ttft_ms
        self.last_decode_tps = finished.stats.decode_tokens_per_second
        s = finished.stats
        log.info(
            "generate_done",
            request_id=ticket.request_id,
            finish_reason=finished.reason,
            prompt_tokens=s.prompt_tokens,
            prefilled_tokens=s.prefilled_tokens,
            evicted_tokens=s.evicted_tokens,
            completion_tokens=s.completion_tokens,
            ttft_ms=round(s.ttft_ms, 1),
            queue_ms=round(s.queue_ms, 1),
            prefill_tps=round(s.prefill_tokens_per_second, 1),
            decode_tps=round(s.decode_tokens_per_second, 1),
        )

    def cancel(self, request_id: str) -> bool:
        """Cancel a running or queued request."""
        return self.worker.cancel(request_id)

    async def close(self) -> None:
        """Stop the worker and free the engine."""
        await self.governor.stop()
        await asyncio.get_running_loop().run_in_executor(None, self.worker.stop)
        if self.engine is not None:
            self.engine.close()
            self.engine, self.cache = None, None
