"""Issue 32, item 12: flag > saved setting > default at start, and `config reset` puts back the
startup values at once (a real daemon serving the default artifact, driven by the real CLI)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from structlog.testing import capture_logs

from edgellm.cli import build_parser
from edgellm.device.cli import config_from
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon
from edgellm.device.rpc.server import start_server as start_daemon
from edgellm.platforms import choose_platform
from tests.cli.conftest import LoopThread, Result
from tests.device.test_admission import meminfo
from tests.trust import trust_server


def _daemon(loop_thread: LoopThread, config: DaemonConfig) -> RunningDaemon:
    running: RunningDaemon = loop_thread.run(start_daemon(config, platform=choose_platform(config)))
    trust_server(running.security, running.port, "config-precedence")
    return running


def _command_line(*flags: str) -> DaemonConfig:
    """The config `edgellm daemon FLAGS` runs with (its explicit settings noted by the parser)."""
    return config_from(build_parser().parse_args(["daemon", "--port", "0", "--no-warmup", *flags]))


def test_only_the_flags_given_count_as_explicit_and_help_still_shows_the_defaults(
    edgellm: Callable[..., Result],
) -> None:
    given = _command_line("--kv-window", "0", "--governor", "thermal").explicit
    assert given == {"port", "warmup", "kv_window", "governor_policy"}  # 0 and thermal: the defaults
    assert _command_line().explicit == {"port", "warmup"}
    text = " ".join(edgellm("daemon", "--help").out.split())
    assert "sliding KV window in tokens (0 = whole context) (default: 0)" in text  # as before


def test_a_flag_given_wins_over_a_saved_setting_even_at_its_default_value_and_the_log_says_so(
    loop_thread: LoopThread, tmp_path: Path, edgellm: Callable[..., Result], default_artifact: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    saved = {"kv_window": 1024, "setpoint_c": 41.5, "governor_policy": "pinned", "power": "low"}
    (data / "settings.json").write_text(json.dumps(saved))
    # --kv-window 0 and --governor thermal are the defaults: only the parser can tell they were given.
    config = _command_line(
        "--data-dir", str(data), "--model", str(default_artifact), "--kv-window", "0", "--governor", "thermal"
    )
    with capture_logs() as logs:
        running = _daemon(loop_thread, config)
    try:
        got = json.loads(edgellm("config", "get", "--json", "--target", f"127.0.0.1:{running.port}").out)
        assert got["kv_window"] == 0 and got["policy"] == "thermal"  # the flags'
        assert got["setpoint_c"] == 41.5  # saved, no flag: applied
    finally:
        loop_thread.run(running.stop(0))
    [over] = [e for e in logs if e["event"] == "saved_settings_overridden"]
    assert set(over["settings"]) == {"kv_window", "governor_policy", "power"}
    assert "kept --kv-window 0 (given on the command line)" in over["settings"]["kv_window"]
    [applied] = [e for e in logs if e["event"] == "saved_settings_applied"]
    assert applied["settings"] == {"setpoint_c": 41.5}
    assert json.loads((data / "settings.json").read_text()) == saved  # still saved for a start without flags


def test_config_reset_puts_back_the_startup_values_now_and_says_what_changed(
    loop_thread: LoopThread, tmp_path: Path, edgellm: Callable[..., Result], default_artifact: Path
) -> None:
    data = tmp_path / "data"
    config = _command_line("--data-dir", str(data), "--model", str(default_artifact), "--threads", "1")
    running = _daemon(loop_thread, config)
    target = ["--target", f"127.0.0.1:{running.port}"]
    try:
        start = json.loads(edgellm("config", "get", "--json", *target).out)
        r = edgellm("config", "set", "threads=2", "kv_window=1024", "setpoint_c=41.5", "power=low", *target)
        assert r.code == 0, r.err
        r = edgellm("config", "reset", *target)
        assert r.code == 0, r.err
        now = json.loads(edgellm("config", "get", "--json", *target).out)
        assert {k: now[k] for k in ("threads", "kv_window", "setpoint_c", "policy")} == {
            k: start[k] for k in ("threads", "kv_window", "setpoint_c", "policy")
        }
        assert (
            "threads 2 -> 1, kv_window 1024 -> 0, governor_policy pinned -> thermal, setpoint_c 41.5 ->"
            in r.err
        )
        assert "not restored" not in r.err and "next start" in r.err
        assert not (data / "settings.json").exists()
        again = edgellm("config", "reset", *target)
        assert "already the daemon's startup values" in again.err
    finally:
        loop_thread.run(running.stop(0))


def test_config_reset_says_which_startup_value_it_cannot_put_back_now_and_why(
    loop_thread: LoopThread, tmp_path: Path, edgellm: Callable[..., Result], default_artifact: Path
) -> None:
    root = meminfo(tmp_path / "root", 8192)  # the start-up window fits
    config = _command_line("--data-dir", str(tmp_path / "data"), "--model", str(default_artifact))
    running = _daemon(loop_thread, config.with_settings(kv_window=4096, proc_root=root))
    target = ["--target", f"127.0.0.1:{running.port}"]
    try:
        assert edgellm("config", "set", "kv_window=1024", "setpoint_c=41.5", *target).code == 0
        meminfo(tmp_path / "root", 257)  # other apps took the memory: a 4,096-token KV no longer fits
        r = edgellm("config", "reset", *target)
        assert r.code == 0, r.err
        assert "setpoint_c 41.5 ->" in r.err  # the rest was put back
        assert "not restored now: kv_window stays 1024: not enough memory for a KV window of 4096" in r.err
        assert json.loads(edgellm("config", "get", "--json", *target).out)["kv_window"] == 1024
    finally:
        loop_thread.run(running.stop(0))
