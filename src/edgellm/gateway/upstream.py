"""One Generate call toward the daemon, primed: the first message is awaited before any HTTP answer,
so a refusal (bad logit_bias id, queue full, unknown model) becomes an HTTP status, not a broken stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import grpc

from edgellm.client.aio import AioDaemon
from edgellm.v1 import device_pb2

STATUS_TIMEOUT_S = 5.0


class Stream:
    """A running Generate call whose first message has arrived; cancel() stops it on the device."""

    def __init__(self, call: Any, first: device_pb2.GenerateResponse) -> None:
        self._call = call
        self.first = first
        self._closed = False

    @classmethod
    async def open(cls, daemon: AioDaemon, request: device_pb2.GenerateRequest) -> Stream:
        """Start the call and wait for its first message (raises grpc.aio.AioRpcError on refusal)."""
        call = daemon.stub.Generate(request, metadata=daemon.metadata)
        try:
            first = await call.read()
        except BaseException:
            call.cancel()
            raise
        if first is grpc.aio.EOF:  # the daemon always ends with a finish message; be safe anyway
            first = device_pb2.GenerateResponse(finish_reason=device_pb2.FINISH_REASON_STOP)
        return cls(call, cast(device_pb2.GenerateResponse, first))

    async def messages(self) -> AsyncIterator[device_pb2.GenerateResponse]:
        """Every message, the primed first one included."""
        msg = self.first
        yield msg
        while not msg.finish_reason:
            read = await self._call.read()
            if read is grpc.aio.EOF:
                return
            msg = cast(device_pb2.GenerateResponse, read)
            yield msg
        # Why read past the finish message: the call then ends with its status, so close() has
        # nothing to cancel (cancelling a call whose status was still in flight cost ~1.6 ms of the
        # event loop per request: cProfile, grpc.aio `_cancel`, 41 calls, 65 ms).
        await self._call.read()

    def cancel(self) -> None:
        """Cancel the call: the daemon's stream ends and its engine stops within a token."""
        self._call.cancel()

    def close(self) -> bool:
        """Cancel the call once (a finished call is unaffected); True only for the first close."""
        if self._closed:
            return False
        self._closed = True
        if not self._call.done():  # a call that ended needs no cancel (see messages())
            self._call.cancel()
        return True


async def status(daemon: AioDaemon) -> device_pb2.DaemonStatus:
    """GetStatus (no sensor reads on the device: state only)."""
    return await daemon.stub.GetStatus(
        device_pb2.GetStatusRequest(), timeout=STATUS_TIMEOUT_S, metadata=daemon.metadata
    )


async def models(daemon: AioDaemon) -> device_pb2.ListModelsResponse:
    """ListModels."""
    return await daemon.stub.ListModels(
        device_pb2.ListModelsRequest(), timeout=STATUS_TIMEOUT_S, metadata=daemon.metadata
    )


async def model_loaded(daemon: AioDaemon) -> bool | None:
    """Whether the daemon has a model loaded (None when it cannot be asked)."""
    try:
        return (await status(daemon)).HasField("model")
    except grpc.aio.AioRpcError:
        return None
