"""Issue 32, items 10-12: `config set` survives a restart (and `config reset` forgets it); `jobs
scan` prints the local table; `jobs list` finds a job id; push and plot keep pipes clean."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon
from edgellm.device.rpc.server import start_server as start_daemon
from edgellm.host.server import RunningHost
from edgellm.platforms import choose_platform
from tests.cli.conftest import LoopThread, Result
from tests.trust import trust_server


def _start(loop_thread: LoopThread, data: Path) -> RunningDaemon:
    config = DaemonConfig.of(port=0, data_dir=data, warmup=False)
    running: RunningDaemon = loop_thread.run(start_daemon(config, platform=choose_platform(config)))
    trust_server(running.security, running.port, "saved-settings")
    return running


def test_config_set_is_applied_again_after_a_restart_until_config_reset(
    loop_thread: LoopThread, tmp_path: Path, edgellm: Callable[..., Result]
) -> None:
    data = tmp_path / "data"
    first = _start(loop_thread, data)
    try:
        r = edgellm(
            "config", "set", "setpoint_c=41.5", "kv_window=1024", "--target", f"127.0.0.1:{first.port}"
        )
        assert r.code == 0 and "after a restart" in r.err and "config reset" in r.err
    finally:
        loop_thread.run(first.stop(0))
    assert json.loads((data / "settings.json").read_text()) == {"kv_window": 1024, "setpoint_c": 41.5}
    second = _start(loop_thread, data)
    try:
        target = f"127.0.0.1:{second.port}"
        got = json.loads(edgellm("config", "get", "--json", "--target", target).out)
        assert got["setpoint_c"] == 41.5 and got["kv_window"] == 1024
        r = edgellm("config", "reset", "--target", target)
        assert r.code == 0 and "next start" in r.err
        assert not (data / "settings.json").exists()
    finally:
        loop_thread.run(second.stop(0))
    third = _start(loop_thread, data)
    try:
        got = json.loads(edgellm("config", "get", "--json", "--target", f"127.0.0.1:{third.port}").out)
        assert got["setpoint_c"] != 41.5 and got["kv_window"] == 0  # the command line's again
    finally:
        loop_thread.run(third.stop(0))


def test_a_saved_setting_the_daemon_now_refuses_is_skipped_not_fatal(
    loop_thread: LoopThread, tmp_path: Path, edgellm: Callable[..., Result]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "settings.json").write_text('{"setpoint_c": 500, "kv_window": "x"}')
    running = _start(loop_thread, data)
    try:
        assert edgellm("config", "get", "--target", f"127.0.0.1:{running.port}").code == 0
    finally:
        loop_thread.run(running.stop(0))


def test_jobs_scan_prints_the_local_table_and_jobs_list_finds_its_id(
    host_service: RunningHost, edgellm: Callable[..., Result], default_artifact: Path
) -> None:
    target = ["--target", f"127.0.0.1:{host_service.port}"]
    local = edgellm("scan", str(default_artifact), "--backend", "cpu")
    remote = edgellm("jobs", "scan", str(default_artifact), "--backend", "cpu", *target)
    assert remote.code == 0 and remote.out.startswith("operator")
    assert remote.out == local.out  # the same table
    assert "done: done" not in remote.err and "] done\n" in remote.err
    job_id = remote.err.split("job ", 1)[1].split()[0]
    listed = edgellm("jobs", "list", *target)
    row = next(line for line in listed.out.splitlines() if line.startswith(job_id))
    assert row.split()[1:3] == ["scan", "done"]
    rows = json.loads(edgellm("jobs", "list", "--json", *target).out)
    assert any(j["job_id"] == job_id and j["state"] == "done" for j in rows)


def test_detach_help_says_what_happens_to_the_job(edgellm: Callable[..., Result]) -> None:
    r = edgellm("jobs", "scan", "--help")
    text = " ".join(r.out.split())
    assert "the job keeps running on the host (follow it with `edgellm jobs watch JOB_ID`)" in text


def test_push_into_a_pipe_writes_no_progress_bar_only_its_result(
    bare_daemon_factory: Callable[..., RunningDaemon], edgellm: Callable[..., Result], default_artifact: Path
) -> None:
    r = edgellm("push", "--target", f"127.0.0.1:{bare_daemon_factory().port}", str(default_artifact))
    assert r.code == 0 and "\r" not in r.err and "MB/s" in r.out, r.err[:500]


def test_the_first_plot_does_not_log_matplotlibs_font_cache_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgellm.client.plot import Trace, plot_traces

    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))  # no cache yet: matplotlib builds one
    plot_traces(
        [Trace("t", [0.0, 1.0], {"cpu": [30.0, 31.0]}, [1.0, 2.0], [0, 0], [], [0, 0])], tmp_path / "p.png"
    )
    assert logging.getLogger("matplotlib.font_manager").getEffectiveLevel() >= logging.ERROR
