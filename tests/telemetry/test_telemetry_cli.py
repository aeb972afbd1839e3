"""`edgellm telemetry`, `edgellm config set` and `edgellm simulate` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgellm.cli import main
from edgellm.client.commands.config import parse_pairs
from edgellm.device.rpc.server import RunningDaemon


def test_config_pairs() -> None:
    req = parse_pairs(["threads=1", "policy=pinned", "pacing=15", "setpoint=39.5"])
    assert (
        req.threads == 1
        and req.governor_policy == "pinned"
        and req.pacing_ms == 15.0
        and req.setpoint_c == 39.5
    )
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_pairs(["turbo=1"])
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_pairs(["threads"])


def test_simulate_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--profile", "sd8gen3", "--minutes", "11", "--governor", "on", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in (
        "mean_tokens_per_second",
        "decay_10min",
        "decay_30min",
        "peak_skin_c",
        "peak_die_c",
        "throttled_seconds",
        "p95_ttft_ratio",
    ):
        assert key in out
    assert out["decay_30min"] is None and out["throttled_seconds"] == 0
    assert main(["simulate", "--profile", "nope", "--json"]) == 2


async def test_telemetry_json_record_plot_and_config(
    daemon: RunningDaemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    target = f"127.0.0.1:{daemon.port}"
    loop = asyncio.get_running_loop()

    def cli(command: str, *args: str) -> int:
        return main([command, "--target", target, *args])

    assert await loop.run_in_executor(None, cli, "telemetry") == 0
    view = capsys.readouterr().out
    assert "governor thermal" in view and "memory" in view and "engine" in view
    assert await loop.run_in_executor(None, cli, "telemetry", "--json") == 0
    sample = json.loads(capsys.readouterr().out)
    assert sample["governor"]["policy"] and int(sample["mem_total_bytes"]) > 0
    rec, png = tmp_path / "t.jsonl", tmp_path / "t.png"
    args = ("telemetry", "--record", str(rec), "--samples", "3", "--interval-ms", "100", "--plot", str(png))
    assert await loop.run_in_executor(None, cli, *args) == 0
    assert len(rec.read_text().splitlines()) == 3 and png.stat().st_size > 1000
    assert await loop.run_in_executor(None, cli, "config", "set", "setpoint=39") == 0
    assert "setpoint_c=39.0" in capsys.readouterr().out
    assert await loop.run_in_executor(None, cli, "config", "set", "policy=turbo") == 2
    assert await loop.run_in_executor(None, cli, "config", "set", "policy=thermal") == 0
