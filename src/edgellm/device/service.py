"""The DeviceDaemon servicer: parse, call the core, map results to messages. Nothing else."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from edgellm.common.errors import FailedPrecondition, InvalidArgument
from edgellm.common.grpc_util import client_stream, server_stream, unary
from edgellm.common.push_manifest import PUSH_STATUS_KEY, parse_manifest
from edgellm.common.push_wire import PushMessage
from edgellm.device.artifact import Artifact
from edgellm.device.core import VERSION, DaemonCore
from edgellm.device.generation import Delta, Finished, Stats
from edgellm.device.governor.remote import apply_update
from edgellm.device.push import PushReceiver
from edgellm.device.requests import job_from
from edgellm.device.store import StoreStatus
from edgellm.device.telemetry.messages import governor_message, sample_message
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]

FINISH = {
    "stop": device_pb2.FINISH_REASON_STOP,
    "length": device_pb2.FINISH_REASON_LENGTH,
    "cancelled": device_pb2.FINISH_REASON_CANCELLED,
    "context": device_pb2.FINISH_REASON_CONTEXT,
}
STATES = {
    "empty": device_pb2.ENGINE_STATE_EMPTY,
    "loading": device_pb2.ENGINE_STATE_LOADING,
    "idle": device_pb2.ENGINE_STATE_IDLE,
    "prefill": device_pb2.ENGINE_STATE_PREFILL,
    "decode": device_pb2.ENGINE_STATE_DECODE,
}


def artifact_info(artifact: Artifact, loaded: bool) -> common_pb2.ArtifactInfo:
    """ArtifactInfo for an artifact."""
    m = artifact.manifest
    return common_pb2.ArtifactInfo(
        artifact_id=artifact.artifact_id,
        name=m.name,
        source_model=m.source.name,
        quantization=m.quantization.label,
        size_bytes=m.size_bytes,
        files=[common_pb2.ArtifactFile(path=f.path, size=f.size, sha256=f.sha256) for f in m.files],
        loaded=loaded,
    )


def status_message(st: StoreStatus) -> device_pb2.ArtifactStatus:
    """ArtifactStatus from the store's StoreStatus."""
    return device_pb2.ArtifactStatus(
        artifact_id=st.artifact_id,
        installed=st.installed,
        files=[
            device_pb2.FileStatus(path=f.path, size=f.size, have_bytes=f.have_bytes, complete=f.complete)
            for f in st.files
        ],
    )


def stats_message(s: Stats) -> device_pb2.GenerateStats:
    """GenerateStats from core Stats."""
    return device_pb2.GenerateStats(
        prompt_tokens=s.prompt_tokens,
        completion_tokens=s.completion_tokens,
        ttft_ms=s.ttft_ms,
        prefill_tokens_per_second=s.prefill_tokens_per_second,
        decode_tokens_per_second=s.decode_tokens_per_second,
        prefilled_tokens=s.prefilled_tokens,
        evicted_tokens=s.evicted_tokens,
        queue_ms=s.queue_ms,
        total_ms=s.total_ms,
    )


class DeviceDaemonService(device_pb2_grpc.DeviceDaemonServicer):
    """gRPC face of DaemonCore."""

    def __init__(self, core: DaemonCore) -> None:
        self.core = core
        self.receiver = PushReceiver(core.store)

    @server_stream
    async def Generate(
        self, request: device_pb2.GenerateRequest, context: Ctx
    ) -> AsyncIterator[device_pb2.GenerateResponse]:
        """Stream a completion."""
        job = job_from(request, self.core.config)
        self.core.resolve_model(request.model)
        async for event in self.core.generate(job):
            if isinstance(event, Delta):
                yield device_pb2.GenerateResponse(
                    text=event.text, token_ids=event.token_ids, request_id=job.request_id
                )
            elif isinstance(event, Finished):
                yield device_pb2.GenerateResponse(
                    request_id=job.request_id,
                    finish_reason=FINISH[event.reason],
                    stats=stats_message(event.stats),
                    stop_sequence=event.stop_sequence,
                )

    @unary
    async def GetStatus(self, request: device_pb2.GetStatusRequest, context: Ctx) -> device_pb2.DaemonStatus:
        """Report model and engine state."""
        return self.status()

    def status(self) -> device_pb2.DaemonStatus:
        """Build the current DaemonStatus."""
        core = self.core
        engine = core.engine
        st = device_pb2.DaemonStatus(
            version=VERSION,
            engine_state=STATES[core.state],
            threads=core.threads,
            queue_depth=core.worker.depth,
            queue_capacity=core.worker.capacity,
            max_new_tokens_cap=core.config.max_new_tokens_cap,
            requests_served=core.requests_served,
            uptime_seconds=time.time() - core.started,
            kv_window=core.config.kv_window,
            n_keep=core.config.n_keep,
            governor=governor_message(core.governor.snapshot()),
        )
        if engine is not None:
            st.model.CopyFrom(artifact_info(engine.artifact, loaded=True))
            st.context_tokens = engine.context_length
            st.load_ms = engine.load_ms
            st.warmup_ms = engine.warmup_ms
        return st

    @server_stream
    async def StreamTelemetry(
        self, request: device_pb2.StreamTelemetryRequest, context: Ctx
    ) -> AsyncIterator[device_pb2.TelemetrySample]:
        """A sample every interval_ms (default 1000, at least 50) until the client cancels."""
        interval = (request.interval_ms or 1000) / 1000.0
        if interval < 0.05:
            raise InvalidArgument("interval_ms must be at least 50")
        core = self.core
        while True:
            gov = core.governor
            live = gov.actuators.tokens_per_second()
            reading = await asyncio.get_running_loop().run_in_executor(None, gov.telemetry.read)
            yield sample_message(
                reading,
                gov.snapshot(),
                STATES[core.state],
                live if core.state in ("prefill", "decode") else core.last_decode_tps,
                core.last_ttft_ms,
            )
            await asyncio.sleep(interval)

    @unary
    async def UpdateConfig(
        self, request: device_pb2.UpdateConfigRequest, context: Ctx
    ) -> device_pb2.DaemonStatus:
        """Change threads, governor policy/setpoint, pinned actuators or the KV window; return the status."""
        await apply_update(self.core, request)
        return self.status()

    @unary
    async def Cancel(self, request: device_pb2.CancelRequest, context: Ctx) -> device_pb2.CancelResponse:
        """Cancel a request by id."""
        if not request.request_id:
            raise InvalidArgument("request_id is required")
        return device_pb2.CancelResponse(cancelled=self.core.cancel(request.request_id))

    # -- artifacts and models (issue 4) ------------------------------------------------------------
    @client_stream
    async def PushArtifact(  # type: ignore[override]  # decoded by edgellm.common.push_wire (handlers.py)
        self, request_iterator: AsyncIterator[PushMessage], context: Ctx
    ) -> device_pb2.PushArtifactResponse:
        """Receive an artifact: manifest first, then chunks; installs atomically when complete."""

        async def ready(st: StoreStatus) -> None:
            await context.send_initial_metadata(((PUSH_STATUS_KEY, status_message(st).SerializeToString()),))

        result = await self.receiver.receive(request_iterator, ready)
        return device_pb2.PushArtifactResponse(
            artifact=artifact_info(result.artifact, loaded=self._is_loaded(result.artifact.artifact_id)),
            bytes_received=result.bytes_received,
            bytes_skipped=result.bytes_skipped,
        )

    @unary
    async def GetArtifactStatus(
        self, request: device_pb2.GetArtifactStatusRequest, context: Ctx
    ) -> device_pb2.ArtifactStatus:
        """What the device already holds of an artifact (for resume)."""
        if request.manifest_json:
            manifest = parse_manifest(request.manifest_json)
        elif request.artifact_id:
            manifest = self.core.store.known_manifest(request.artifact_id)
        else:
            raise InvalidArgument("give manifest_json or artifact_id")
        return status_message(self.core.store.status(manifest))

    @unary
    async def DeleteArtifact(
        self, request: device_pb2.DeleteArtifactRequest, context: Ctx
    ) -> device_pb2.DeleteArtifactResponse:
        """Delete an installed artifact; the loaded one is refused."""
        artifact_id = self.core.store.resolve_dir(request.artifact_id).name  # any schema can be deleted
        if self._is_loaded(artifact_id):
            raise FailedPrecondition(f"artifact {artifact_id[:12]} is loaded; unload it first")
        self.core.store.delete(artifact_id)
        return device_pb2.DeleteArtifactResponse()

    @unary
    async def ListModels(
        self, request: device_pb2.ListModelsRequest, context: Ctx
    ) -> device_pb2.ListModelsResponse:
        """Installed artifacts, plus the loaded one if it was loaded from a directory."""
        arts = self.core.store.installed()
        engine = self.core.engine
        if engine is not None and engine.artifact.artifact_id not in {a.artifact_id for a in arts}:
            arts.append(engine.artifact)
        return device_pb2.ListModelsResponse(
            models=[artifact_info(a, loaded=self._is_loaded(a.artifact_id)) for a in arts]
        )

    @unary
    async def LoadModel(
        self, request: device_pb2.LoadModelRequest, context: Ctx
    ) -> device_pb2.LoadModelResponse:
        """Load (admission-checked) and warm up a model."""
        info = await self.core.load(self.core.resolve_artifact(request.model))
        return device_pb2.LoadModelResponse(
            model=artifact_info(info.artifact, loaded=True), load_ms=info.load_ms, warmup_ms=info.warmup_ms
        )

    @unary
    async def UnloadModel(
        self, request: device_pb2.UnloadModelRequest, context: Ctx
    ) -> device_pb2.UnloadModelResponse:
        """Unload the model and forget it (a restart will not reload it)."""
        await self.core.unload()
        return device_pb2.UnloadModelResponse()

    def _is_loaded(self, artifact_id: str) -> bool:
        engine = self.core.engine
        return engine is not None and engine.artifact.artifact_id == artifact_id
