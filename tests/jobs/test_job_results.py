"""Host job results travel typed (JobEvent.result) and as the legacy JSON; the client prints the typed one."""

from __future__ import annotations

import json

from edgellm.client.host_client import outcome
from edgellm.client.job_summary import summary
from edgellm.host.job_results import JobResult, evaluate_result, set_result
from edgellm.v1 import host_pb2

EVALUATION = {
    "artifact": "/a",
    "size_bytes": 1000,
    "text": "wikitext2-test.txt",
    "tokens": 160,
    "context": 128,
    "stride": 64,
    "reference": None,
    "results": {
        "fp": {"ppl": 10.0, "tokens": 159},
        "mnn": {"ppl": 11.0, "tokens": 159, "top1": 0.9, "kl": 0.1},
    },
}


def test_an_evaluation_travels_typed_and_as_the_same_json_as_before() -> None:
    event = host_pb2.JobEvent(job_id="evaluate-1", done=True)
    set_result(event, evaluate_result(EVALUATION))

    assert json.loads(event.result_json) == EVALUATION
    got = outcome(event)
    assert got.result == EVALUATION and isinstance(got.typed, host_pb2.EvaluateResult)
    scores = {s.model: s for s in got.typed.scores}
    assert scores["mnn"].kl == 0.1 and not scores["fp"].HasField("kl")


def test_a_deploy_result_without_stats_says_null_in_json_as_before() -> None:
    result = JobResult.of(host_pb2.DeployResult(artifact_id="abc", load_ms=12.5, sample="Hi"))

    assert result.data["ttft_ms"] is None and result.data["decode_tokens_per_second"] is None
    assert result.data["load_ms"] == 12.5 and result.data["completion_tokens"] == 0


def test_the_client_prints_the_score_table_from_the_typed_result() -> None:
    text = summary(evaluate_result(EVALUATION).message)

    lines = text.splitlines()
    assert lines[0].split() == ["model", "ppl", "top1", "kl"]
    assert lines[2].split() == ["fp", "10.0000", "-", "-"]
    assert lines[3].split() == ["mnn", "11.0000", "0.9000", "0.1000"]
    assert "artifact                 /a" in text


def test_a_failed_job_has_no_typed_result() -> None:
    got = outcome(host_pb2.JobEvent(job_id="x", done=True, error="INTERNAL: boom"))
    assert got.typed is None and got.result is None and got.error_code == "INTERNAL"
