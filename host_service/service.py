"""HostService servicer: thin RPC methods over plain-Python cores.

Quantize / Evaluate / ScanOperators / WatchJob come from :class:`JobRpcs` (long jobs that stream
progress and survive client disconnects). Deploy and ListArtifacts belong to the artifact-store
and deploy work; until they land, the generated base class answers them UNIMPLEMENTED.
"""

from __future__ import annotations

from edgellm.v1 import host_pb2_grpc
from host_service.job_rpcs import JobRpcs
from host_service.jobs import JobManager


class HostService(JobRpcs, host_pb2_grpc.HostServiceServicer):
    """The host's gRPC service."""

    def __init__(self, jobs: JobManager | None = None) -> None:
        self.jobs = jobs or JobManager()
