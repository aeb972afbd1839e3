"""`edgellm status` shows the thread choice, when it was measured, and any re-check due."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from edgellm.device.config import DaemonConfig
from edgellm.device.core.autotune import ThreadTrial, ThreadTuning
from edgellm.device.core.tuning_cache import TuningCache, tuning_key
from edgellm.device.rpc.server import RunningDaemon
from edgellm.device.rpc.server import start_server as start_daemon
from edgellm.engine.artifact import open_artifact
from tests.cli.conftest import LoopThread, Result
from tests.fakes.fake_artifact import write_fake_artifact
from tests.fakes.fake_engine import FakeEngine

HOURS = 3


def test_status_shows_the_cached_choice_and_its_age(
    loop_thread: LoopThread, tmp_path: Path, edgellm: Callable[..., Result]
) -> None:
    artifact = write_fake_artifact(tmp_path / "artifact")
    data = tmp_path / "data"
    measured = time.time() - HOURS * 3600
    trials = (ThreadTrial(1, 41.8, 200.0), ThreadTrial(2, 68.0, 310.0))
    key = tuning_key(open_artifact(artifact).artifact_id)
    TuningCache(data).put(key, ThreadTuning(2, trials, seconds=9.1, measured_unix=measured))
    config = DaemonConfig.of(
        port=0, model=artifact, data_dir=data, autotune=True, draft_max=0, insecure_loopback=True
    )
    running: RunningDaemon = loop_thread.run(start_daemon(config, FakeEngine.factory()))
    try:
        target = f"127.0.0.1:{running.port}"
        text = edgellm("status", "--target", target, "--insecure-loopback")
        assert text.code == 0, text.err
        line = next(line for line in text.out.splitlines() if line.startswith("threads"))
        assert "autotuned 2 (decode 1: 41.8 tok/s, 2: 68.0 tok/s" in line
        assert f"measured {HOURS} h ago" in line and "re-check" not in line
        as_json = edgellm("status", "--target", target, "--json", "--insecure-loopback")
        tuning = json.loads(as_json.out)["thread_tuning"]
        assert tuning["cached"] and abs(tuning["measured_unix"] - measured) < 1
    finally:
        loop_thread.run(running.stop(0))
