"""HostService's job RPCs (Quantize, Evaluate, ScanOperators, WatchJob, ListJobs): parse, submit, stream.

The servicer inherits :class:`JobRpcs`; each RPC validates its request synchronously (bad input
is refused before any job exists), submits the plain-Python core to the :class:`JobManager`,
and streams the job's events. A client that disconnects only stops its own stream.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from edgellm.common.errors import InvalidArgument, NotFound
from edgellm.common.grpc_util import server_stream, unary
from edgellm.common.paths import resolve_artifact
from edgellm.host.job_results import JobResult, evaluate_result, quantize_result, scan_result, set_result
from edgellm.host.jobs import Job, JobManager, JobUpdate, Progress
from edgellm.host.outputs import confine_output
from edgellm.host.quantize.plan import PlanError
from edgellm.host.quantize.run import QuantizeJob, make_job, run_job
from edgellm.v1 import common_pb2, host_pb2

Ctx = grpc.aio.ServicerContext[Any, Any]


def to_event(update: JobUpdate) -> host_pb2.JobEvent:
    """A job update as the wire message."""
    event = host_pb2.JobEvent(
        job_id=update.job_id,
        progress=common_pb2.Progress(
            stage=update.stage,
            fraction=update.fraction,
            eta_seconds=update.eta_seconds,
            message=update.message,
        ),
        done=update.done,
        error=update.error,
    )
    if update.result is not None:
        set_result(event, update.result)
    return event


def job_info(job: Job, now: float) -> host_pb2.JobInfo:
    """A job as `ListJobs` shows it."""
    last = job.last
    return host_pb2.JobInfo(
        job_id=job.job_id,
        kind=job.kind,
        state=job.state,
        stage=last.stage if last is not None else job.stage,
        fraction=last.fraction if last is not None else 0.0,
        age_seconds=now - job.submitted,
        error=last.error if last is not None else "",
    )


def check_quantize_fields(req: host_pb2.QuantizeRequest) -> None:
    """Refuse a QuantizeRequest without a model, an output or (for plan auto) a budget."""
    if not req.model:
        raise InvalidArgument("model is required ('default' or a Hugging Face directory)")
    if req.model != "default" and not (Path(req.model) / "config.json").is_file():
        raise NotFound(f"{req.model} is not a Hugging Face checkpoint directory")
    if not req.output_dir:
        raise InvalidArgument("output_dir is required")
    if req.plan == "auto" and not 0 < req.ppl_budget < 1:
        raise InvalidArgument(f"plan auto needs ppl_budget in (0, 1), e.g. 0.03; got {req.ppl_budget}")


def check_quantize(req: host_pb2.QuantizeRequest) -> QuantizeJob:
    """Validate a QuantizeRequest into a job (the CLI's defaults: unset fields are None)."""
    check_quantize_fields(req)
    try:
        return make_job(
            req.model,
            req.plan or "int4",
            Path(req.output_dir),
            budget=req.ppl_budget or None,
            method=req.method or None,
            bits=req.bits or None,
            block=req.block or None,  # proto3 cannot tell 0 from unset: per channel needs a JSON plan
        )
    except PlanError as exc:
        raise InvalidArgument(f"bad plan: {exc}") from exc


def run_quantize(req: host_pb2.QuantizeRequest, progress: Progress) -> JobResult:
    """The Quantize job's core."""
    return quantize_result(run_job(check_quantize(req), progress))


def check_evaluate(req: host_pb2.EvaluateRequest) -> None:
    """Validate an EvaluateRequest."""
    if not (resolve_artifact(req.artifact_dir) / "config.json").is_file():
        raise NotFound(f"no MNN artifact at {req.artifact_dir!r} (config.json missing)")
    if req.text_file and not Path(req.text_file).is_file():
        raise NotFound(f"text file {req.text_file} not found")
    if req.tokens and req.tokens < 2:
        raise InvalidArgument("tokens must be at least 2")


def run_evaluate(req: host_pb2.EvaluateRequest, progress: Progress) -> JobResult:
    """The Evaluate job's core."""
    from edgellm.host.evaluate.artifact import evaluate_artifact, reference_dir
    from edgellm.host.evaluate.evaluate import EvalConfig

    artifact = resolve_artifact(req.artifact_dir)
    tokens = req.tokens or 2048
    cfg = EvalConfig(
        text_file=Path(req.text_file) if req.text_file else None,
        tokens=tokens,
        context=min(512, tokens),
        stride=min(256, tokens),
    )
    reference, why = reference_dir(artifact)
    result = evaluate_artifact(artifact, cfg, reference, progress=progress)
    return evaluate_result(result if reference else {**result, "reference_missing": why})


def check_scan(req: host_pb2.ScanOperatorsRequest) -> None:
    """Validate a ScanOperatorsRequest."""
    from edgellm.host.scan.support import backends

    if req.backend not in backends():
        raise InvalidArgument(f"backend must be one of {', '.join(backends())}, got {req.backend!r}")
    path = resolve_artifact(req.artifact_dir)
    if not (path / "llm.mnn").is_file() and not (path.is_file() and path.suffix == ".mnn"):
        raise NotFound(f"no llm.mnn at {req.artifact_dir!r}")


def run_scan(req: host_pb2.ScanOperatorsRequest, progress: Progress) -> JobResult:
    """The ScanOperators job's core (fallback allowed: the report lists what would fall back)."""
    from edgellm.host.scan.scan import scan

    progress(0.1, "scan: dumping graph")
    return scan_result(scan(resolve_artifact(req.artifact_dir), req.backend))


class JobRpcs:
    """Mixin for the HostService servicer: the long-running job RPCs."""

    jobs: JobManager
    artifacts_root: Path

    async def _stream(self, job: Job) -> AsyncIterator[host_pb2.JobEvent]:
        async for update in job.watch():
            yield to_event(update)

    @server_stream
    async def Quantize(
        self, request: host_pb2.QuantizeRequest, context: Ctx
    ) -> AsyncIterator[host_pb2.JobEvent]:
        """Quantize a model into an artifact under the artifacts root, streaming progress."""
        check_quantize(request)
        confined = host_pb2.QuantizeRequest()
        confined.CopyFrom(request)
        confined.output_dir = str(confine_output(request.output_dir, self.artifacts_root))
        async for event in self._stream(self.jobs.submit("quantize", lambda p: run_quantize(confined, p))):
            yield event

    @server_stream
    async def Evaluate(
        self, request: host_pb2.EvaluateRequest, context: Ctx
    ) -> AsyncIterator[host_pb2.JobEvent]:
        """Measure an artifact's perplexity, streaming progress."""
        check_evaluate(request)
        async for event in self._stream(self.jobs.submit("evaluate", lambda p: run_evaluate(request, p))):
            yield event

    @server_stream
    async def ScanOperators(
        self, request: host_pb2.ScanOperatorsRequest, context: Ctx
    ) -> AsyncIterator[host_pb2.JobEvent]:
        """Scan an artifact's operators against a backend's support table."""
        check_scan(request)
        async for event in self._stream(self.jobs.submit("scan", lambda p: run_scan(request, p))):
            yield event

    @unary
    async def ListJobs(self, request: host_pb2.ListJobsRequest, context: Ctx) -> host_pb2.ListJobsResponse:
        """The jobs this service still holds, oldest first (to find a job id again)."""
        now = time.monotonic()
        return host_pb2.ListJobsResponse(jobs=[job_info(job, now) for job in self.jobs.list()])

    @server_stream
    async def WatchJob(
        self, request: host_pb2.WatchJobRequest, context: Ctx
    ) -> AsyncIterator[host_pb2.JobEvent]:
        """Re-attach to a job: replay its events, then follow it."""
        async for event in self._stream(self.jobs.get(request.job_id)):
            yield event
