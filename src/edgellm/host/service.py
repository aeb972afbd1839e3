"""HostService servicer: thin RPC methods over plain-Python cores.

Quantize / Evaluate / ScanOperators / WatchJob come from :class:`JobRpcs` (long jobs that stream
progress and survive client disconnects); Deploy runs `edgellm.host.deploy_job.deploy` the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from edgellm.common.errors import EdgeError, NotFound, PermissionDenied
from edgellm.common.grpc_util import server_stream, unary
from edgellm.common.logs import get_logger
from edgellm.common.paths import cache_dir, resolve_artifact
from edgellm.common.targets import resolve_target
from edgellm.engine.artifact import open_artifact
from edgellm.engine.wire import artifact_info
from edgellm.host.deploy_job import deploy
from edgellm.host.job_results import JobResult
from edgellm.host.job_rpcs import JobRpcs
from edgellm.host.jobs import JobManager
from edgellm.v1 import host_pb2, host_pb2_grpc

log = get_logger(__name__)

Ctx = grpc.aio.ServicerContext[Any, Any]


class HostService(JobRpcs, host_pb2_grpc.HostServiceServicer):
    """The host's gRPC service."""

    def __init__(
        self,
        jobs: JobManager | None = None,
        artifacts_root: Path | None = None,
        deploy_targets: tuple[str, ...] = (),
    ) -> None:
        self.jobs = jobs or JobManager()
        self.artifacts_root = artifacts_root or cache_dir() / "artifacts"
        # Deploy sends the host's token to its target, so callers choose only among these (S10).
        self.deploy_targets = deploy_targets or (resolve_target(None),)

    def deploy_target(self, requested: str) -> str:
        """REQUESTED if it is a configured target ('' = the first); else PERMISSION_DENIED."""
        if not requested:
            return self.deploy_targets[0]
        if requested not in self.deploy_targets:
            raise PermissionDenied(
                f"target {requested!r} is not one this host service deploys to "
                f"({', '.join(self.deploy_targets)}); to allow it, start the host service with "
                f"`edgellm host --deploy-target {requested}`"
            )
        return requested

    @server_stream
    async def Deploy(self, request: host_pb2.DeployRequest, context: Ctx) -> AsyncIterator[host_pb2.JobEvent]:
        """Push an artifact to a device daemon, load it, run a short generation; stream progress."""
        if not request.artifact_dir:
            raise NotFound("artifact_dir is required: the artifact directory on this host")
        artifact = resolve_artifact(request.artifact_dir)
        open_artifact(artifact)  # refuse a missing or incomplete artifact before starting a job
        target = self.deploy_target(request.target)
        job = self.jobs.submit("deploy", lambda p: JobResult.of(deploy(artifact, target, p)))
        async for event in self._stream(job):
            yield event

    @unary
    async def ListArtifacts(
        self, request: host_pb2.ListArtifactsRequest, context: Ctx
    ) -> host_pb2.ListArtifactsResponse:
        """Artifacts (valid manifests) under the host's artifact directory, by content id."""
        infos = []
        for path in sorted(self.artifacts_root.glob("*/manifest.json")):
            try:
                infos.append(artifact_info(open_artifact(path.parent), loaded=False))
            except (EdgeError, OSError) as err:
                log.info("artifact_skipped", path=str(path.parent), reason=str(err))
        return host_pb2.ListArtifactsResponse(artifacts=infos)
