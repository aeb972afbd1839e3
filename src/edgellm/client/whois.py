"""Which edgellm service answers at an address: asked of its health service (open without a token).

Why: a client pointed at the other service's port got gRPC's bare `UNIMPLEMENTED: Method not
found!`. Both servers register their service name with health (`common.server.Health`), and a
health check for a name the server does not serve answers NOT_FOUND, so one check says which it is.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.common.channel import ChannelSecurity, open_channel
from edgellm.common.errors import EdgeError
from edgellm.v1 import device_pb2, host_pb2

DAEMON = "daemon"
HOST_SERVICE = "host service"
# Each service's full gRPC name, as its server registers it with health.
SERVICES = {
    DAEMON: device_pb2.DESCRIPTOR.services_by_name["DeviceDaemon"].full_name,
    HOST_SERVICE: host_pb2.DESCRIPTOR.services_by_name["HostService"].full_name,
}
PROBE_TIMEOUT_S = 3.0


def service_at(target: str, security: ChannelSecurity) -> str | None:
    """DAEMON or HOST_SERVICE for the edgellm server at target; None when it cannot be told."""
    try:
        channel = open_channel(target, security)
    except EdgeError:  # no trust for a token-bearing channel: nothing to ask
        return None
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for kind, name in SERVICES.items():
            try:
                stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=PROBE_TIMEOUT_S)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.NOT_FOUND:
                    continue
                return None
            return kind
    return None
