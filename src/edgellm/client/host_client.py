"""A small synchronous client for the host service (HostService): submit jobs, follow their events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from edgellm.common.channel import ChannelSecurity, open_channel
from edgellm.common.errors import Unavailable
from edgellm.common.targets import resolve_host_target
from edgellm.v1 import host_pb2, host_pb2_grpc

JobMessage = host_pb2.QuantizeResult | host_pb2.EvaluateResult | host_pb2.ScanResult | host_pb2.DeployResult


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended, as its last event said."""

    job_id: str
    result: dict[str, Any] | None  # the legacy JSON document (`--json`); None when the job failed
    error: str  # "" on success; else "CODE: message"
    typed: JobMessage | None = None  # the typed result; None on failure or from an older host service

    @property
    def error_code(self) -> str:
        """The gRPC status name the host gave the failure (e.g. INVALID_ARGUMENT), or ""."""
        head, sep, _ = self.error.partition(":")
        return head if sep and head.isupper() else ""


class HostClient:
    """Blocking client over one channel (the token is sent on every call); a context manager."""

    def __init__(self, target: str | None = None, security: ChannelSecurity | str | None = None) -> None:
        """SECURITY: the token and TLS trust (a bare string is a token; None: found without flags)."""
        self.target = resolve_host_target(target)
        self.channel = open_channel(self.target, security)
        self.stub = host_pb2_grpc.HostServiceStub(self.channel)

    def __enter__(self) -> HostClient:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.channel.close()

    def start(self, kind: str, request: Any) -> Iterator[host_pb2.JobEvent]:
        """Submit a job (quantize, evaluate, scan, deploy) or re-attach (watch); yield its events.

        Closing the iterator (or Ctrl-C) only stops following: the job keeps running on the host.
        """
        rpc: Any = {
            "quantize": self.stub.Quantize,
            "evaluate": self.stub.Evaluate,
            "scan": self.stub.ScanOperators,
            "deploy": self.stub.Deploy,
            "watch": self.stub.WatchJob,
        }[kind]
        call = rpc(request)
        try:
            yield from call
        finally:
            call.cancel()

    def jobs(self) -> host_pb2.ListJobsResponse:
        """The jobs the host service still holds."""
        return self.stub.ListJobs(host_pb2.ListJobsRequest(), timeout=30)

    def artifacts(self) -> host_pb2.ListArtifactsResponse:
        """Artifacts in the host's cache."""
        return self.stub.ListArtifacts(host_pb2.ListArtifactsRequest(), timeout=30)


def outcome(event: host_pb2.JobEvent) -> JobOutcome:
    """The outcome carried by a job's last event."""
    result = json.loads(event.result_json) if event.result_json and not event.error else None
    kind = event.WhichOneof("result")
    typed: JobMessage | None = getattr(event, kind) if kind and not event.error else None
    return JobOutcome(event.job_id, result, event.error, typed)


def follow(events: Iterator[host_pb2.JobEvent]) -> Iterator[host_pb2.JobEvent]:
    """Events until the last one (done); Unavailable if the stream ends before it."""
    job_id = ""
    for event in events:
        job_id = event.job_id or job_id
        yield event
        if event.done:
            return
    raise Unavailable(
        f"the host service closed the stream before job {job_id or '?'} finished; "
        f"re-attach with `edgellm jobs watch {job_id or 'JOB_ID'}`"
    )
