"""HostService job RPCs on a real gRPC server (port 0): streaming, disconnect and re-watch, bad requests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.common.errors import InvalidArgument
from edgellm.host.job_results import JobResult
from edgellm.host.jobs import JobManager
from edgellm.host.server import HostConfig, start_server
from edgellm.v1 import host_pb2, host_pb2_grpc


@pytest_asyncio.fixture
async def stub() -> AsyncIterator[host_pb2_grpc.HostServiceStub]:
    running = await start_server(HostConfig(port=0, insecure_loopback=True))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        yield host_pb2_grpc.HostServiceStub(channel)
    await running.stop(0)


async def _drain(call: Any) -> list[host_pb2.JobEvent]:
    return [event async for event in call]


async def test_scan_streams_progress_and_result(
    stub: host_pb2_grpc.HostServiceStub, tiny_artifact: tuple[Path, dict[str, Any]]
) -> None:
    path, _ = tiny_artifact
    events = await _drain(
        stub.ScanOperators(host_pb2.ScanOperatorsRequest(artifact_dir=str(path), backend="npu"))
    )
    assert events[0].job_id and all(e.job_id == events[0].job_id for e in events)
    assert events[-1].done and not events[-1].error
    result = json.loads(events[-1].result_json)  # the deprecated JSON, kept for older clients
    assert "Attention" in result["fallback"]
    assert events[-1].WhichOneof("result") == "scan"
    typed = events[-1].scan
    assert typed.backend == "npu" and "Attention" in typed.fallback
    assert {o.op for o in typed.ops if not o.supported} == set(typed.fallback)
    assert [e.progress.fraction for e in events] == sorted(e.progress.fraction for e in events)


async def test_evaluate_survives_disconnect_and_can_be_rewatched(
    stub: host_pb2_grpc.HostServiceStub, tiny_artifact: tuple[Path, dict[str, Any]]
) -> None:
    path, _ = tiny_artifact
    call: Any = stub.Evaluate(host_pb2.EvaluateRequest(artifact_dir=str(path), tokens=160))
    first = cast(host_pb2.JobEvent, await call.read())
    job_id = first.job_id
    call.cancel()  # the client goes away; the job must keep running
    await asyncio.sleep(0.2)
    events = await _drain(stub.WatchJob(host_pb2.WatchJobRequest(job_id=job_id)))
    assert events[0].job_id == job_id and events[0].progress.stage == "queued"  # replayed from the start
    last = events[-1]
    assert last.done and not last.error, last.error
    result = json.loads(last.result_json)  # the deprecated JSON, kept for older clients
    assert result["results"]["mnn"]["ppl"] > 1 and result["results"]["fp"]["ppl"] > 1
    scores = {s.model: s for s in last.evaluate.scores}
    assert scores["mnn"].ppl == result["results"]["mnn"]["ppl"] and scores["fp"].ppl > 1
    assert scores["mnn"].HasField("kl") and scores["fp"].kl == 0  # fp against itself
    assert last.evaluate.tokens == 160 and last.evaluate.artifact == str(path)
    again = await _drain(stub.WatchJob(host_pb2.WatchJobRequest(job_id=job_id)))  # finished jobs stay
    assert again[-1].result_json == last.result_json and again[-1].evaluate == last.evaluate


@pytest.mark.parametrize(
    ("rpc", "request_", "code", "text"),
    [
        (
            "Quantize",
            host_pb2.QuantizeRequest(model="default", method="hqq", output_dir="x"),
            "INVALID_ARGUMENT",
            "method",
        ),
        (
            "Quantize",
            host_pb2.QuantizeRequest(model="default", plan="auto", output_dir="x"),
            "INVALID_ARGUMENT",
            "ppl_budget",
        ),
        (
            "Quantize",
            host_pb2.QuantizeRequest(model="default", plan="int4", block=100, output_dir="x"),
            "INVALID_ARGUMENT",
            "block",
        ),
        (
            "Quantize",
            host_pb2.QuantizeRequest(model="/nonexistent", output_dir="x"),
            "NOT_FOUND",
            "checkpoint",
        ),
        # S10: Quantize writes only under the host's artifacts directory.
        (
            "Quantize",
            host_pb2.QuantizeRequest(model="default", output_dir="/tmp"),
            "PERMISSION_DENIED",
            "outside",
        ),
        (
            "Quantize",
            host_pb2.QuantizeRequest(model="default", output_dir="../x"),
            "PERMISSION_DENIED",
            "outside",
        ),
        ("Evaluate", host_pb2.EvaluateRequest(artifact_dir="/nonexistent"), "NOT_FOUND", "no MNN artifact"),
        (
            "ScanOperators",
            host_pb2.ScanOperatorsRequest(artifact_dir=".", backend="tpu"),
            "INVALID_ARGUMENT",
            "backend",
        ),
        ("WatchJob", host_pb2.WatchJobRequest(job_id="nope"), "NOT_FOUND", "no job"),
    ],
)
async def test_bad_requests_get_precise_status(
    stub: host_pb2_grpc.HostServiceStub, rpc: str, request_: Any, code: str, text: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _drain(getattr(stub, rpc)(request_))
    assert err.value.code().name == code and text in (err.value.details() or "")


@pytest.mark.parametrize(
    ("error", "reported"),
    [
        (InvalidArgument("bad thing"), "INVALID_ARGUMENT: bad thing"),
        # A plain ValueError is a broken invariant, not the caller's fault.
        (ValueError("bad thing"), "INTERNAL: ValueError: bad thing"),
    ],
)
def test_failed_job_reports_error_to_watchers(error: Exception, reported: str) -> None:
    jobs = JobManager()

    def boom(progress: Any) -> JobResult:
        progress(0.5, "work: half")
        raise error

    job = jobs.submit("t", boom)
    deadline = time.monotonic() + 10
    while not job.done and time.monotonic() < deadline:
        time.sleep(0.01)

    async def collect() -> list[Any]:
        return [u async for u in job.watch()]

    updates = asyncio.run(collect())
    assert updates[-1].done and updates[-1].error == reported
    assert any(u.stage == "work" for u in updates)
    jobs.shutdown()
