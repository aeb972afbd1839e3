"""The short fuzz run of `make test`: 500 hostile requests (tests/reliability/hostile.py) against a
real daemon process serving the real model. The 10,000-request run is bench/bench_fuzz.py."""

from __future__ import annotations

import os
from pathlib import Path

from tests.reliability.fuzz_setup import daemon_for_fuzz, fuzz_target
from tests.reliability.hostile import run_fuzz

N = int(os.environ.get("EDGELLM_FUZZ_N", "500"))
SEED = int(os.environ.get("EDGELLM_FUZZ_SEED", "14"))  # fixed: CI replays the same 500 calls


def test_hostile_requests_never_crash_the_daemon_or_answer_internal(
    default_artifact: Path, tmp_path: Path
) -> None:
    daemon = daemon_for_fuzz(default_artifact, tmp_path / "data")
    daemon.start()
    try:
        target = fuzz_target(daemon, default_artifact)
        report = run_fuzz(target, N, SEED)
        summary = report.summary()
        assert report.crashes == 0 and daemon.alive(), daemon.log_tail()
        assert report.unexpected == [], summary
        assert report.calls >= N * 0.9, summary
        assert summary["codes"].get("OK", 0) > 0 and summary["codes"].get("INVALID_ARGUMENT", 0) > 0
        target.restore()
        assert daemon.health() == "SERVING"
    finally:
        assert daemon.stop() == 0, daemon.log_tail()
