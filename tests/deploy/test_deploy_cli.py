"""`edgellm deploy` argument parsing and exit codes (the subcommand against the fake adb server)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from edgellm.deploy.cli import register
from tests.deploy.conftest import Rig
from tests.deploy.fake_adb_server import FakeAdbServer
from tests.deploy.fake_phone import FakePhone


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="edgellm")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_dry_run_from_the_command_line(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(rig.adb.port))
    assert rig.config.wheel is not None
    ns = parse(["deploy", "device", "--dry-run", "--wheel", str(rig.config.wheel), "--port", "0"])
    assert ns.handler(ns) == 0
    out = capsys.readouterr().out
    assert "phone FAKE0001: Pixel 8, Android 14 (SDK 34)" in out
    assert "control channel: run-as" in out
    assert out.count("would run") == 5
    assert rig.adb.recorded.pushed == [] and rig.phone.install_runs == 0


def test_unauthorised_phone_exits_1_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeAdbServer([FakePhone(state="unauthorized")]) as adb:
        monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(adb.port))
        ns = parse(["deploy", "status"])
        assert ns.handler(ns) == 1
    assert "Allow USB debugging" in capsys.readouterr().err


def test_every_action_parses() -> None:
    for action in ("device", "status", "logs", "stop", "uninstall"):
        ns = parse(["deploy", action, "--serial", "S1"])
        assert ns.action == action and ns.serial == "S1"
    assert parse(["deploy", "device", "--artifact", "default"]).artifact == "default"
    assert parse(["deploy", "logs", "-n", "5"]).lines == 5


def test_wheel_build_is_reproducible_by_construction(tmp_path: Path) -> None:
    """The wheel is built with SOURCE_DATE_EPOCH so an unchanged tree hashes the same (re-run skips)."""
    import subprocess
    from collections.abc import Sequence

    from edgellm.deploy.device import build_wheel

    seen: list[list[str]] = []

    def runner(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        seen.append(list(argv))
        (tmp_path / "edgellm-0.1.0-py3-none-any.whl").write_bytes(b"w")
        return subprocess.CompletedProcess(argv, 0, "", "")

    assert build_wheel(tmp_path, runner).name == "edgellm-0.1.0-py3-none-any.whl"
    assert seen[0][:2] == ["env", "SOURCE_DATE_EPOCH=315532800"]
    assert seen[0][3:7] == ["-m", "pip", "wheel", "--no-deps"]
