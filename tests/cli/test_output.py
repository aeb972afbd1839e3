"""What the client prints: telemetry modes, one JSON convention, models and config, the rung plot."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from edgellm.client.commands.telemetry import render, trace_from_samples
from edgellm.client.jsonout import message_dict
from edgellm.device.rpc.server import RunningDaemon
from edgellm.v1 import device_pb2
from tests.cli.conftest import Result


def test_telemetry_plot_alone_writes_a_png(
    bare_daemon_factory: Callable[..., RunningDaemon], edgellm: Callable[..., Result], tmp_path: Path
) -> None:
    target = f"127.0.0.1:{bare_daemon_factory().port}"
    png = tmp_path / "t.png"
    r = edgellm("telemetry", "--target", target, "--plot", str(png), "--samples", "3", "--interval-ms", "50")
    assert r.code == 0 and png.stat().st_size > 1000 and f"wrote {png}" in r.out


def test_watch_into_a_pipe_writes_no_terminal_codes(
    bare_daemon_factory: Callable[..., RunningDaemon], edgellm: Callable[..., Result]
) -> None:
    target = f"127.0.0.1:{bare_daemon_factory().port}"
    r = edgellm("telemetry", "--target", target, "--watch", "--samples", "2", "--interval-ms", "50")
    assert r.code == 0 and "\x1b" not in r.out and r.out.count("governor") == 2


def test_an_unreadable_frequency_shows_as_n_a() -> None:
    sample = device_pb2.TelemetrySample(
        cores=[
            device_pb2.CoreFrequency(cpu=0, cluster=0, cur_khz=0, max_khz=0),
            device_pb2.CoreFrequency(cpu=1, cluster=1, cur_khz=2_400_000, max_khz=3_000_000),
        ]
    )
    view = render(sample)
    assert "c0:n/a" in view and "c1:2.40GHz" in view and "0.00GHz" not in view


def test_json_keeps_64_bit_numbers_and_core_zero() -> None:
    sample = device_pb2.TelemetrySample(
        mem_total_bytes=12 * 2**30,
        cores=[device_pb2.CoreFrequency(cpu=0, cluster=0, cur_khz=0, max_khz=0)],
        governor=device_pb2.GovernorState(policy="off"),
    )
    d = message_dict(sample)
    assert d["mem_total_bytes"] == 12 * 2**30 and isinstance(d["rss_bytes"], int)
    assert d["cores"] == [{"cpu": 0, "cluster": 0, "cur_khz": 0, "max_khz": 0}]
    assert d["governor"]["rung"] == 0 and d["engine_state"] == "ENGINE_STATE_UNSPECIFIED"


def test_status_and_telemetry_json_share_one_convention(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result]
) -> None:
    target = f"127.0.0.1:{model_daemon.port}"
    status = json.loads(edgellm("status", "--target", target, "--json").out)
    sample = json.loads(edgellm("telemetry", "--target", target, "--json").out)
    for d in (status, sample):
        assert all(k == k.lower() for k in d), d.keys()  # snake_case, as in the .proto
        assert d["governor"]["policy"] == "thermal"
    assert isinstance(status["requests_served"], int) and isinstance(sample["mem_total_bytes"], int)
    assert status["model"]["size_bytes"] > 100_000_000  # a uint64, as a number
    assert sample["cores"][0]["cpu"] == 0


def test_models_json_lists_what_was_pushed(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result], default_artifact: Path
) -> None:
    target = f"127.0.0.1:{model_daemon.port}"
    assert edgellm("push", "--target", target, str(default_artifact)).code == 0
    r = edgellm("models", "--target", target, "--json")
    models = json.loads(r.out)
    assert r.code == 0 and len(models) == 1
    m = models[0]
    assert m["name"] == "smollm2-135m-instruct" and isinstance(m["size_bytes"], int)
    assert "manifest_json" not in m and m["files"]
    assert "smollm2-135m-instruct" in edgellm("models", "--target", target).out


def test_config_get_prints_what_config_set_changed(
    bare_daemon_factory: Callable[..., RunningDaemon], edgellm: Callable[..., Result]
) -> None:
    target = f"127.0.0.1:{bare_daemon_factory().port}"
    r = edgellm("config", "set", "setpoint_c=41.5", "--target", target)
    assert r.code == 0 and "setpoint_c=41.5" in r.out
    assert edgellm("config", "get", "setpoint_c", "--target", target).out.strip() == "41.5"
    values = json.loads(edgellm("config", "--target", target, "get", "--json").out)
    assert values["setpoint_c"] == 41.5 and values["policy"] == "thermal" and "rung" in values
    assert values["thermal_policy"] == "comfort"
    r = edgellm("config", "set", "thermal_policy=throughput", "--target", target)
    assert r.code == 0 and "thermal_policy=throughput" in r.out
    r = edgellm("config", "set", "thermal_policy=fastest", "--target", target)
    assert r.code != 0 and "thermal_policy must be one of comfort, throughput" in r.err
    r = edgellm("config", "get", "turbo", "--target", target)
    assert r.code == 2 and "unknown setting" in r.err
    r = edgellm("config", "set", "threads=two", "--target", target)
    assert r.code == 2 and "integer" in r.err


def test_the_rung_follows_the_governor_and_the_plot_follows_the_rung(
    bare_daemon_factory: Callable[..., RunningDaemon], edgellm: Callable[..., Result]
) -> None:
    running = bare_daemon_factory(virtual_phone="sd8gen3")
    target = f"127.0.0.1:{running.port}"
    refusal = edgellm("config", "set", "cluster=?", "--target", target)  # names the rungs, fastest first
    ladder = refusal.err.split("cluster must be one of ")[1].split(", not")[0].split(", ")
    assert refusal.code == 2 and len(ladder) >= 3  # the virtual phone has clusters to step through
    samples = []
    for rung, label in enumerate(ladder):
        assert edgellm("config", "set", f"cluster={label}", "--target", target).code == 0
        d = json.loads(edgellm("telemetry", "--json", "--target", target).out)
        assert d["governor"]["rung"] == rung and d["governor"]["cluster"] == label
        samples.append(d)
    trace = trace_from_samples(samples)
    assert trace.rung == [float(k) for k in range(len(ladder))]  # the panel is no longer flat


def test_a_constraint_turns_the_default_frequency_penalty_off() -> None:
    """JSON repeats quotes and commas by design: the default penalty is 0 under a constraint."""
    from edgellm.cli import build_parser
    from edgellm.client.commands.common_args import params_from_args
    from edgellm.client.commands.generate import constraint_from

    def sent(argv: list[str]) -> float:
        ns = build_parser().parse_args(argv)
        return params_from_args(ns, constraint=constraint_from(ns)).frequency_penalty  # as generate does

    plain = sent(["generate", "x"])
    json_out = sent(["generate", "--json-object", "x"])
    explicit = sent(["generate", "--json-object", "--frequency-penalty", "0.3", "x"])
    assert plain > 0 and json_out == 0.0
    assert explicit == 0.3
