"""A few readable lines for a host job's typed result (`edgellm jobs`; `--json` prints everything)."""

from __future__ import annotations

from edgellm.client.host_client import JobMessage
from edgellm.common.op_table import op_table
from edgellm.common.score_table import table
from edgellm.v1 import host_pb2


def score_rows(scores: list[host_pb2.ModelScore]) -> dict[str, dict[str, float | None]]:
    """The table's rows: scorer -> ppl, top1, kl (None where not measured)."""
    return {
        s.model: {
            "ppl": s.ppl,
            "top1": s.top1 if s.HasField("top1") else None,
            "kl": s.kl if s.HasField("kl") else None,
        }
        for s in scores
    }


def _lines(pairs: list[tuple[str, object]]) -> list[str]:
    return [f"{key:<24} {value}" for key, value in pairs]


def evaluate_summary(r: host_pb2.EvaluateResult) -> list[str]:
    """The score table, then the artifact and its size."""
    lines = [table(score_rows(list(r.scores)))] if r.scores else []
    if r.reference_missing:
        lines.append(f"no top-1/KL: {r.reference_missing}")
    return lines + _lines([("artifact", r.artifact), ("size_bytes", r.size_bytes)])


def quantize_summary(r: host_pb2.QuantizeResult) -> list[str]:
    """The measured scores, then the artifact, its size and the quantization time."""
    lines = [table(score_rows(list(r.evaluation.scores)))] if r.evaluation.scores else []
    return lines + _lines([("artifact", r.artifact), ("size_bytes", r.size_bytes), ("seconds", r.seconds)])


def scan_summary(r: host_pb2.ScanResult) -> list[str]:
    """The operator table, as the local `edgellm scan` prints it."""
    rows = [(o.op, o.count, o.supported) for o in r.ops]
    return [op_table(r.backend, rows, list(r.fallback), r.fallback_nodes, r.table_source)]


def deploy_summary(r: host_pb2.DeployResult) -> list[str]:
    """The artifact id and the device's decode speed and TTFT."""
    pairs: list[tuple[str, object]] = [("artifact_id", r.artifact_id)]
    if r.HasField("decode_tokens_per_second"):
        pairs.append(("decode_tokens_per_second", r.decode_tokens_per_second))
    if r.HasField("ttft_ms"):
        pairs.append(("ttft_ms", r.ttft_ms))
    return _lines(pairs)


def summary(result: JobMessage) -> str:
    """The readable lines for any job kind's result."""
    if isinstance(result, host_pb2.EvaluateResult):
        return "\n".join(evaluate_summary(result))
    if isinstance(result, host_pb2.QuantizeResult):
        return "\n".join(quantize_summary(result))
    if isinstance(result, host_pb2.ScanResult):
        return "\n".join(scan_summary(result))
    return "\n".join(deploy_summary(result))
