"""`edgellm jobs`: the host service's client — submit, follow streamed progress, re-attach, list."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edgellm.host.server import RunningHost
from tests.cli.conftest import Result


@pytest.fixture
def host_target(host_service: RunningHost) -> str:
    return f"127.0.0.1:{host_service.port}"


def test_a_scan_runs_on_the_host_and_streams_its_progress(
    host_target: str, edgellm: Callable[..., Result], tiny_artifact: tuple[Path, dict[str, Any]]
) -> None:
    artifact, _ = tiny_artifact
    r = edgellm("jobs", "scan", str(artifact), "--backend", "npu", "--target", host_target)
    # As the local `edgellm scan`: the operator table, and exit 1 for a fallback unless allowed.
    assert r.code == 1 and "pass --allow-fallback" in r.err, r.err
    assert "job scan-" in r.err and "[100%] done" in r.err  # one line per stage into a pipe
    assert "Attention" in r.out and "NO -> cpu fallback" in r.out
    r = edgellm(
        "jobs", "scan", str(artifact), "--backend", "npu", "--allow-fallback", "--target", host_target
    )
    assert r.code == 0 and "unsupported: Attention" in r.out, r.err
    r = edgellm("jobs", "scan", str(artifact), "--backend", "npu", "--json", "--target", host_target)
    assert "Attention" in json.loads(r.out)["fallback"]


def test_a_job_can_be_detached_and_watched_again(
    host_target: str, edgellm: Callable[..., Result], tiny_artifact: tuple[Path, dict[str, Any]]
) -> None:
    artifact, _ = tiny_artifact
    r = edgellm("jobs", "eval", str(artifact), "--tokens", "160", "--detach", "--target", host_target)
    job_id = r.out.strip()
    assert r.code == 0 and job_id.startswith("evaluate-")
    r = edgellm("jobs", "watch", job_id, "--json", "--target", host_target)
    assert r.code == 0 and "[  0%] queued" in r.err  # replayed from the start
    result = json.loads(r.out)
    assert result["results"]["mnn"]["ppl"] > 1


@pytest.mark.slow  # 30-70 s: a real RTN export and a 2,048-token evaluation (no size knob in the RPC)
def test_a_quantization_runs_on_the_host(
    host_target: str, edgellm: Callable[..., Result], tiny_hf: Path, tmp_path: Path
) -> None:
    out = tmp_path / "q"
    argv = ["jobs", "quantize", "--model", str(tiny_hf), "--method", "rtn", "--block", "32", "-o", str(out)]
    r = edgellm(*argv, "--target", host_target)
    assert r.code == 0, r.err
    assert "quantize" in r.err and "[100%] done" in r.err
    assert (out / "manifest.json").is_file() and "size_bytes" in r.out


def test_bad_jobs_are_refused_with_exit_2(
    host_target: str, edgellm: Callable[..., Result], tmp_path: Path
) -> None:
    r = edgellm("jobs", "scan", "/nonexistent", "--target", host_target)
    assert r.code == 2 and "no llm.mnn" in r.err and "Traceback" not in r.err
    r = edgellm(
        "jobs", "quantize", "--model", str(tmp_path), "-o", str(tmp_path / "x"), "--target", host_target
    )
    assert r.code == 2 and "not a Hugging Face checkpoint" in r.err
    r = edgellm("jobs", "watch", "quantize-000000000000", "--target", host_target)
    assert r.code == 2 and "no job" in r.err


def test_the_host_lists_its_artifacts(host_target: str, edgellm: Callable[..., Result]) -> None:
    r = edgellm("jobs", "artifacts", "--json", "--target", host_target)
    assert r.code == 0 and isinstance(json.loads(r.out), list)
