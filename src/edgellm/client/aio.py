"""An asyncio connection to the device daemon: the same target, options and credentials as DaemonClient."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc

from edgellm.common.channel import (
    DEFAULT_OPTIONS,
    ChannelSecurity,
    Options,
    _security,
    handshake_failed,
    open_aio_channel,
    trusted_tls,
)
from edgellm.common.pins import diagnose
from edgellm.common.targets import resolve_target
from edgellm.common.tls import ClientTls
from edgellm.v1 import device_pb2_grpc

# Why a short reconnect backoff: this channel lives as long as the gateway, and gRPC's default
# backoff (1 s, x1.6 per failed attempt, up to 120 s) grew while a daemon was down, so after a 90 s
# restart the gateway answered "not reachable" for 28 s more while a fresh CLI channel already
# worked. Capped at 2 s, an attempt is one loopback (or adb-forwarded) connect every 2 s at most.
RECONNECT_OPTIONS: Options = (
    *DEFAULT_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


@dataclass
class AioDaemon:
    """An aio channel and its stub; the token and TLS ride on the channel's credentials."""

    target: str
    channel: grpc.aio.Channel
    stub: device_pb2_grpc.DeviceDaemonAsyncStub
    trust: ClientTls | None = None  # the certificates the channel accepts (for failure messages)

    async def why_unreachable(self, details: str) -> str | None:
        """When a call failed in the TLS handshake: what answered and which server was expected."""
        if not handshake_failed(details):
            return None
        return await asyncio.to_thread(diagnose, self.target, self.trust)

    async def close(self) -> None:
        """Close the channel (cancels calls still open)."""
        await self.channel.close()


def connect(target: str | None = None, security: ChannelSecurity | str | None = None) -> AioDaemon:
    """Open a channel to the daemon at target ($EDGELLM_TARGET, then the default).

    SECURITY: the token and TLS trust (a bare string is a token; None: found without flags, as the
    blocking client finds them). The channel connects lazily: the first RPC waits for it.
    """
    address = resolve_target(target)
    security = _security(security, address)
    channel = open_aio_channel(address, security, RECONNECT_OPTIONS)
    stub: device_pb2_grpc.DeviceDaemonAsyncStub = device_pb2_grpc.DeviceDaemonStub(channel)
    trust = trusted_tls(security) if security.token is not None or security.tls is not None else None
    return AioDaemon(address, channel, stub, trust)
