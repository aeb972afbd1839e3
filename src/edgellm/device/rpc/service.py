"""The DeviceDaemon servicer: check the request, call the core, map the answer. Nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from edgellm.common.errors import InvalidArgument
from edgellm.common.grpc_util import client_stream, current_request_id, server_stream, unary
from edgellm.common.push_manifest import PUSH_STATUS_KEY
from edgellm.common.push_wire import PushMessage
from edgellm.device.core.daemon import DaemonCore
from edgellm.device.rpc import wire
from edgellm.device.rpc.limits import Pace, Slots, paced
from edgellm.device.rpc.validation import check_id, generation_job
from edgellm.device.store import StoreStatus
from edgellm.device.telemetry.shared import MIN_TELEMETRY_INTERVAL_MS
from edgellm.engine.wire import artifact_info
from edgellm.v1 import device_pb2, device_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]


class DeviceDaemonService(device_pb2_grpc.DeviceDaemonServicer):
    """gRPC face of DaemonCore."""

    def __init__(self, core: DaemonCore) -> None:
        self.core = core
        cfg = core.config
        self.push_slots = Slots("pushes", cfg.store.max_pushes, "wait for one to finish, then push again")
        self.push_pace = Pace(
            cfg.store.push_idle_timeout_s, cfg.store.push_min_bytes_per_s, cfg.store.push_rate_grace_s
        )
        self.telemetry_slots = Slots(
            "telemetry streams", cfg.server.max_telemetry_streams, "close one (each costs sensor reads)"
        )

    @server_stream
    async def Generate(
        self, request: device_pb2.GenerateRequest, context: Ctx
    ) -> AsyncIterator[device_pb2.GenerateResponse]:
        """Stream a completion."""
        job = generation_job(request, self.core.config, current_request_id())
        async for event in self.core.generate(job, request.model, context.time_remaining()):
            yield wire.generate_response(event, job.request_id)

    @unary
    async def Cancel(self, request: device_pb2.CancelRequest, context: Ctx) -> device_pb2.CancelResponse:
        """Cancel a request by id."""
        if not request.request_id:
            raise InvalidArgument("request_id is required")
        check_id("request_id", request.request_id)
        return device_pb2.CancelResponse(cancelled=self.core.cancel(request.request_id))

    @unary
    async def GetStatus(self, request: device_pb2.GetStatusRequest, context: Ctx) -> device_pb2.DaemonStatus:
        """Report model and engine state."""
        return wire.status_message(self.core.status())

    @unary
    async def UpdateConfig(
        self, request: device_pb2.UpdateConfigRequest, context: Ctx
    ) -> device_pb2.DaemonStatus:
        """Change threads, governor policy/setpoint, pinned actuators or the KV window; return the status."""
        restored = await self.core.update(wire.config_update_from(request))
        status = wire.status_message(self.core.status())
        status.restored.extend(wire.restore_message(r) for r in restored)
        return status

    @server_stream
    async def StreamTelemetry(
        self, request: device_pb2.StreamTelemetryRequest, context: Ctx
    ) -> AsyncIterator[device_pb2.TelemetrySample]:
        """A sample every interval_ms (default 1000, at least 50) until the client cancels."""
        interval_ms = request.interval_ms or 1000
        if interval_ms < MIN_TELEMETRY_INTERVAL_MS:
            raise InvalidArgument(f"interval_ms must be at least {MIN_TELEMETRY_INTERVAL_MS}")
        with self.telemetry_slots.take():
            while True:
                yield wire.sample_message(await self.core.telemetry())
                await asyncio.sleep(interval_ms / 1000)

    # -- models and artifacts --------------------------------------------------------------------
    @unary
    async def LoadModel(
        self, request: device_pb2.LoadModelRequest, context: Ctx
    ) -> device_pb2.LoadModelResponse:
        """Load (admission-checked) and warm up a model."""
        info = await self.core.load_model(request.model)
        return device_pb2.LoadModelResponse(
            model=artifact_info(info.artifact, loaded=True),
            load_ms=info.load_ms,
            warmup_ms=info.warmup_ms,
        )

    @unary
    async def UnloadModel(
        self, request: device_pb2.UnloadModelRequest, context: Ctx
    ) -> device_pb2.UnloadModelResponse:
        """Unload the model and forget it (a restart will not reload it)."""
        await self.core.unload()
        return device_pb2.UnloadModelResponse()

    @unary
    async def ListModels(
        self, request: device_pb2.ListModelsRequest, context: Ctx
    ) -> device_pb2.ListModelsResponse:
        """Installed artifacts, plus artifact directories the daemon loaded (while they exist)."""
        entries = await self.core.list_models_async()
        return device_pb2.ListModelsResponse(models=[artifact_info(e.artifact, e.loaded) for e in entries])

    @client_stream
    async def PushArtifact(  # type: ignore[override]  # decoded by edgellm.common.push_wire (registration.py)
        self, request_iterator: AsyncIterator[PushMessage], context: Ctx
    ) -> device_pb2.PushArtifactResponse:
        """Receive an artifact: manifest first, then chunks; installs atomically when complete."""

        async def ready(st: StoreStatus) -> None:
            status = wire.artifact_status_message(st).SerializeToString()
            await context.send_initial_metadata(((PUSH_STATUS_KEY, status),))

        with self.push_slots.take():
            messages = paced(request_iterator, self.push_pace, _message_bytes, "push")
            result = await self.core.push(messages, ready)
        art = result.artifact
        return device_pb2.PushArtifactResponse(
            artifact=artifact_info(art, loaded=self.core.is_loaded(art.artifact_id)),
            bytes_received=result.bytes_received,
            bytes_skipped=result.bytes_skipped,
        )

    @unary
    async def GetArtifactStatus(
        self, request: device_pb2.GetArtifactStatusRequest, context: Ctx
    ) -> device_pb2.ArtifactStatus:
        """What the device already holds of an artifact (for resume)."""
        st = await self.core.artifact_status(
            manifest_json=request.manifest_json, artifact_id=request.artifact_id
        )
        return wire.artifact_status_message(st)

    @unary
    async def DeleteArtifact(
        self, request: device_pb2.DeleteArtifactRequest, context: Ctx
    ) -> device_pb2.DeleteArtifactResponse:
        """Delete an installed artifact; the loaded one is refused."""
        await self.core.delete_artifact(request.artifact_id)
        return device_pb2.DeleteArtifactResponse()


def _message_bytes(message: PushMessage) -> int:
    """What a push message carries (a chunk's data, or the manifest), for the push's rate."""
    return len(message.data) + len(message.manifest_json or "")
