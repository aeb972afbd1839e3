"""An asyncio connection to the device daemon: the same target, options and credentials as DaemonClient."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from edgellm.client.client import MAX_MESSAGE_BYTES
from edgellm.common.auth import client_metadata
from edgellm.common.targets import resolve_target
from edgellm.v1 import device_pb2_grpc

CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)


@dataclass
class AioDaemon:
    """An aio channel, its stub and the call metadata (bearer token) every RPC must carry."""

    target: str
    channel: grpc.aio.Channel
    stub: device_pb2_grpc.DeviceDaemonAsyncStub
    metadata: tuple[tuple[str, str | bytes], ...]

    async def close(self) -> None:
        """Close the channel (cancels calls still open)."""
        await self.channel.close()


def connect(target: str | None = None, token: str | None = None) -> AioDaemon:
    """Open a channel to the daemon at target ($EDGELLM_TARGET, then the default) with its token.

    The channel connects lazily: the first RPC waits for it.
    """
    address = resolve_target(target)
    channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    stub: device_pb2_grpc.DeviceDaemonAsyncStub = device_pb2_grpc.DeviceDaemonStub(channel)
    return AioDaemon(address, channel, stub, client_metadata(token))
