"""Host job results as typed messages (JobEvent's `result` oneof): the one mapping for every job kind.

Each job's core returns a `JobResult`: the typed message the clients read, and the JSON document
older clients read from the deprecated `result_json` field (the same keys as before).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from edgellm.v1 import host_pb2

if TYPE_CHECKING:  # the scan pulls in the MNN graph reader; a job server imports this at start
    from edgellm.host.scan.scan import ScanReport

JobMessage = host_pb2.QuantizeResult | host_pb2.EvaluateResult | host_pb2.ScanResult | host_pb2.DeployResult

# JobEvent's `result` field for each message type.
ONEOF_FIELD = {
    host_pb2.QuantizeResult.DESCRIPTOR.full_name: "quantize",
    host_pb2.EvaluateResult.DESCRIPTOR.full_name: "evaluate",
    host_pb2.ScanResult.DESCRIPTOR.full_name: "scan",
    host_pb2.DeployResult.DESCRIPTOR.full_name: "deploy",
}


@dataclass(frozen=True)
class JobResult:
    """What a host job returns: its typed message and the legacy JSON document."""

    message: JobMessage
    data: dict[str, Any]

    @classmethod
    def of(cls, message: JobMessage) -> JobResult:
        """A result whose legacy document is the message's own fields (unset optional ones: null)."""
        return cls(message, plain_fields(message))

    @property
    def json(self) -> str:
        """The legacy `result_json` text."""
        return json.dumps(self.data, default=str)


def plain_fields(message: Message) -> dict[str, Any]:
    """Scalar fields by name; an optional field that is unset reads None (what the JSON said before)."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        present = not field.has_presence or message.HasField(field.name)
        out[field.name] = getattr(message, field.name) if present else None
    return out


def set_result(event: host_pb2.JobEvent, result: JobResult) -> None:
    """Fill the event's `result` oneof and its deprecated `result_json`."""
    getattr(event, ONEOF_FIELD[result.message.DESCRIPTOR.full_name]).CopyFrom(result.message)
    event.result_json = result.json


def scores(results: dict[str, dict[str, Any]]) -> list[host_pb2.ModelScore]:
    """ModelScore rows from an evaluation's `results` (scorer -> ppl, tokens[, top1, kl])."""
    return [
        host_pb2.ModelScore(
            model=name, ppl=r["ppl"], tokens=int(r.get("tokens", 0)), top1=r.get("top1"), kl=r.get("kl")
        )
        for name, r in results.items()
    ]


def evaluation_message(data: dict[str, Any]) -> host_pb2.EvaluateResult:
    """EvaluateResult from an evaluation record (`edgellm eval`'s, or the manifest's `evaluation`)."""
    return host_pb2.EvaluateResult(
        artifact=data.get("artifact", ""),
        size_bytes=data.get("size_bytes", 0),
        text=data.get("text", ""),
        tokens=data.get("tokens", 0),
        context=data.get("context", 0),
        stride=data.get("stride", 0),
        reference=data.get("reference") or "",
        reference_missing=data.get("reference_missing", ""),
        scores=scores(data.get("results", {})),
    )


def evaluate_result(data: dict[str, Any]) -> JobResult:
    """An Evaluate job's result."""
    return JobResult(evaluation_message(data), data)


def quantize_result(summary: dict[str, Any]) -> JobResult:
    """A Quantize job's result from the build summary (and the auto search's record, kept in JSON)."""
    message = host_pb2.QuantizeResult(
        artifact=summary["artifact"],
        name=summary["name"],
        size_bytes=summary["size_bytes"],
        seconds=summary["seconds"],
        quantize_cpu_seconds=summary["quantize_cpu_seconds"],
        plan_json=json.dumps(summary["plan"], sort_keys=True),
    )
    if summary.get("evaluation"):
        message.evaluation.CopyFrom(evaluation_message(summary["evaluation"]))
    return JobResult(message, summary)


def scan_result(report: ScanReport) -> JobResult:
    """A ScanOperators job's result from the scan report."""
    message = host_pb2.ScanResult(
        artifact=report.artifact,
        backend=report.backend,
        ops=[host_pb2.OperatorSupport(op=o.op, count=o.count, supported=o.supported) for o in report.ops],
        fallback=report.fallback,
        fallback_nodes=report.fallback_nodes,
        table_source=report.table_source,
    )
    return JobResult(message, report.to_dict())
