"""`edgellm deploy` end to end against the fake adb server and a fake Termux phone."""

from __future__ import annotations

import dataclasses
import re
import shlex
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.deploy.adb import DeployError
from edgellm.deploy.channel import PROLOGUE_MARKER
from edgellm.deploy.device import deploy_device, deploy_logs, deploy_status, deploy_stop, deploy_uninstall
from edgellm.deploy.flow import MODEL_PATH, STAMP_PATH
from tests.deploy.conftest import Rig, free_port
from tests.deploy.fake_adb_server import FakeAdbServer
from tests.deploy.fake_phone import BOOT_SCRIPT, SERVICE_DIR, FakePhone

# Every `adb shell` command the deploy may send, as a real phone's shell accepts it.
REAL_PHONE_COMMANDS = [
    r"getprop ro\.build\.version\.(sdk|release)",
    r"getprop ro\.product\.model",
    r"pm list packages -i com\.termux",
    r'dumpsys package com\.termux \| grep -E "versionName\|flags"',
    r"settings (get|put) global settings_enable_monitor_phantom_procs( false)?",
    r"device_config get activity_manager max_phantom_processes",
    r"device_config put activity_manager max_phantom_processes 2147483647",
    r"device_config set_sync_disabled_for_tests persistent",
    r"dumpsys deviceidle whitelist( \+com\.termux)?",
    r"run-as com\.termux id -u",
    r"run-as com\.termux /data/data/com\.termux/files/usr/bin/bash -c '.*'",
    r"mkdir -p /data/local/tmp/edgellm && chmod 755 /data/local/tmp/edgellm",
]
# Adb server services the deploy may use (adbutils' wire names).
ADB_SERVICES = [
    r"host:version",
    r"host:devices(-l)?",
    r"host:tport:serial:\S+",
    r"host-serial:\S+:(features|list-forward|forward:tcp:\d+;tcp:(50051|8022)|killforward:tcp:\d+)",
    r"shell,v2:.*",
    r"sync:",
]
# Commands that change the phone (matched at the start of a command or Termux script).
MUTATING = re.compile(
    r"settings put|device_config (put|set_sync)|dumpsys deviceidle whitelist \+|service-daemon|sv down"
    r"|mkdir -p \S+ && (cp|bash) |printf|rm "
)


def assert_only_real_commands(rig: Rig) -> None:
    for _, cmd in rig.adb.recorded.shell:
        assert any(re.fullmatch(p, cmd, re.DOTALL) for p in REAL_PHONE_COMMANDS), cmd
    for service in rig.adb.recorded.services:
        assert any(re.fullmatch(p, service, re.DOTALL) for p in ADB_SERVICES), service
    assert rig.phone.unknown == []


def health(port: int) -> str:
    """Health through the forward, trusting what the deploy trusted (no token: health needs none)."""
    from edgellm.common.channel import ChannelSecurity, open_channel, trusted_tls

    with open_channel(f"127.0.0.1:{port}", ChannelSecurity(None, tls=trusted_tls(ChannelSecurity()))) as ch:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(r.status))


def test_full_deploy_then_rerun_changes_nothing(rig: Rig) -> None:
    config = dataclasses.replace(rig.config, artifact=Path("/tmp/artifacts/smollm2"))
    reports = deploy_device(config, rig.io)
    assert [r.outcome for r in reports] == ["done"] * 5
    phone = rig.phone
    # Keep-alive (Android 14): phantom-process killer off, Termux on the Doze whitelist, asked once.
    assert phone.settings["settings_enable_monitor_phantom_procs"] == "false"
    assert "com.termux" in phone.doze_whitelist
    assert len(rig.prompts) == 1 and "phantom" in rig.prompts[0]
    # Files, installer, service, boot script, forward, artifact.
    assert phone.install_runs == 1 and phone.service == "run"
    assert f"{SERVICE_DIR}/run" in phone.files and BOOT_SCRIPT in phone.files
    assert phone.files[MODEL_PATH] == b"smollm2-135m-q4\n"
    assert (rig.phone.serial, f"tcp:{config.local_port}", "tcp:50051") in rig.adb.recorded.forwards
    assert health(config.local_port) == "SERVING"  # through the fake's real forward to the daemon
    assert any(line.startswith("installer 127.0.0.1:") for line in rig.output)
    assert any("edgellm generate --target" in line for line in rig.output)
    # S2: the phone's token reached the host's config, 0600, where every client looks.
    token_file = config.token_path()
    assert token_file.read_text().strip() == rig.daemon.running.token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert_only_real_commands(rig)

    # Re-run: every step is already done, and nothing that changes the phone is sent.
    shell_before = len(rig.adb.recorded.shell)
    pushed_before = len(rig.adb.recorded.pushed)
    forwards_before = len(rig.adb.recorded.forwards)
    scripts_before = len(phone.termux_scripts)
    reports = deploy_device(config, rig.io)
    assert [r.outcome for r in reports] == ["skipped"] * 5
    assert len(rig.adb.recorded.pushed) == pushed_before
    assert len(rig.adb.recorded.forwards) == forwards_before
    new_cmds = [c for _, c in rig.adb.recorded.shell[shell_before:]]
    new_cmds += phone.termux_scripts[scripts_before:]
    assert [c for c in new_cmds if MUTATING.match(c.split(PROLOGUE_MARKER + "\n")[-1])] == []
    assert phone.install_runs == 1 and phone.restarts == 1 and len(rig.prompts) == 1
    assert_only_real_commands(rig)


def test_upgrade_reinstalls_and_restarts(rig: Rig, tmp_path: Path) -> None:
    deploy_device(rig.config, rig.io)
    newer = tmp_path / "new" / "edgellm-0.2.0-py3-none-any.whl"
    newer.parent.mkdir()
    newer.write_bytes(b"newer wheel")
    reports = deploy_device(dataclasses.replace(rig.config, wheel=newer), rig.io)
    assert {r.name: r.outcome for r in reports} == {
        "keep-alive": "skipped",
        "files": "done",
        "install": "done",
        "service": "done",
        "forward": "skipped",
    }
    assert rig.phone.install_runs == 2 and rig.phone.restarts == 2
    assert [p for _, p, _ in rig.adb.recorded.pushed][-1].endswith("edgellm-0.2.0-py3-none-any.whl")


def test_dropped_connection_mid_push_is_retried(rig: Rig) -> None:
    rig.adb.drop_pushes = 1
    deploy_device(rig.config, rig.io)
    assert rig.phone.service == "run"
    assert len(rig.adb.recorded.pushed) == 5  # each file landed once; the dropped one was resent
    assert_only_real_commands(rig)


def test_resume_after_a_run_killed_by_drops(rig: Rig) -> None:
    rig.adb.drop_pushes = 100  # from the first push on, every push dies: the run fails cleanly
    with pytest.raises(DeployError, match=r"dropped|failed"):
        deploy_device(rig.config, rig.io)
    assert rig.phone.install_runs == 0
    rig.adb.drop_pushes = 0
    reports = deploy_device(rig.config, rig.io)
    assert {r.name: r.outcome for r in reports}["keep-alive"] == "skipped"  # applied before the drop
    assert rig.phone.service == "run"


def test_dry_run_prints_every_step_and_changes_nothing(rig: Rig) -> None:
    reports = deploy_device(dataclasses.replace(rig.config, dry_run=True, artifact=Path("/a/m")), rig.io)
    assert [r.outcome for r in reports] == ["would run"] * 5
    text = "\n".join(rig.output)
    for expected in (
        "keep-alive: would run",
        "$ settings put global settings_enable_monitor_phantom_procs false",
        "$ dumpsys deviceidle whitelist +com.termux",
        "push install.sh -> /data/data/com.termux/files/home/.edgellm/deploy/install.sh",
        "bash /data/data/com.termux/files/home/.edgellm/deploy/install.sh --wheel",
        "sv restart edgellm",
        f"forward tcp:{rig.config.local_port} tcp:50051",
        "would push /a/m",
    ):
        assert expected in text, expected
    assert rig.adb.recorded.pushed == [] and rig.adb.recorded.forwards == []
    assert rig.phone.install_runs == 0 and rig.phone.settings == {} and rig.prompts == []
    assert_only_real_commands(rig)


@pytest.mark.parametrize(
    ("sdk", "expected"),
    [
        (31, {"max_phantom_processes": "2147483647"}),
        (30, {}),
    ],
)
def test_phantom_killer_per_android_version(rig: Rig, sdk: int, expected: dict[str, str]) -> None:
    rig.phone.sdk = sdk
    deploy_device(rig.config, rig.io)
    assert rig.phone.device_config == expected
    assert rig.phone.settings == {}
    assert_only_real_commands(rig)


def test_declined_keepalive_warns_and_continues(rig: Rig) -> None:
    io = dataclasses.replace(rig.io, confirm=lambda _t: False)
    deploy_device(rig.config, io)
    assert rig.phone.doze_whitelist == set()
    assert any("declined" in line for line in rig.output)


def test_installer_failure_is_reported_with_log_hint(rig: Rig) -> None:
    rig.phone.install_fails = True
    with pytest.raises(DeployError, match=r"(?s)installer failed.*resumable.*MNN build"):
        deploy_device(rig.config, rig.io)
    rig.phone.install_fails = False
    deploy_device(rig.config, rig.io)
    assert rig.phone.service == "run"


def test_status_logs_stop_uninstall(rig: Rig) -> None:
    deploy_device(rig.config, rig.io)
    report = deploy_status(rig.config, rig.io)
    assert report["service"].startswith("run: edgellm")
    assert report["phantom-process killer"] == "off" and report["doze whitelist"] == "yes"
    assert report["forward"] == f"tcp:{rig.config.local_port} -> tcp:50051"
    assert report["boot script"] == "yes"
    assert "daemon_listening" in deploy_logs(rig.config, 10, rig.io)
    deploy_stop(rig.config, rig.io)
    assert rig.phone.service == "down"
    assert deploy_status(rig.config, rig.io)["forward"].endswith("none")
    deploy_uninstall(rig.config, rig.io)
    assert rig.phone.service == "absent" and BOOT_SCRIPT not in rig.phone.files
    assert STAMP_PATH not in rig.phone.files
    assert_only_real_commands(rig)


def test_non_debuggable_termux_uses_sshd(rig: Rig, tmp_path: Path) -> None:
    """run-as fails: the deploy forwards 8022 and drives Termux's sshd (an emulated ssh/scp)."""
    rig.phone.debuggable = False
    calls: list[list[str]] = []
    key_installed = {"done": False}

    def runner(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        if argv[0] == "ssh-keygen":
            key = Path(argv[-1])
            key.write_text("PRIVATE")
            key.with_name(key.name + ".pub").write_text("ssh-ed25519 AAAA edgellm-deploy\n")
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[0] == "ssh":
            if not key_installed["done"]:
                return subprocess.CompletedProcess(argv, 255, "", "Permission denied (publickey).")
            remote = argv[-1]
            assert remote.startswith("bash -c ")
            rc, out, err = rig.phone.termux(shlex.split(remote)[2])
            return subprocess.CompletedProcess(argv, rc, out, err)
        if argv[0] == "scp":
            rig.phone.files[argv[-1].split(":", 1)[1]] = Path(argv[-2]).read_bytes()
            return subprocess.CompletedProcess(argv, 0, "", "")
        raise AssertionError(argv)

    def confirm(text: str) -> bool:
        if "authorized_keys" in text:
            # The user types the shown line into Termux.
            assert rig.phone.files["/sdcard/Download/edgellm_id_ed25519.pub"].startswith(b"ssh-ed25519")
            key_installed["done"] = True
        return True

    from edgellm.deploy.channel import SshKeys

    # Why a free port, not the default 58022: the fake adb server really listens on it, and another
    # process on this machine (a second test run) may hold 58022, which failed the forward.
    config = dataclasses.replace(
        rig.config, ssh_keys=SshKeys(tmp_path / "ssh" / "id_ed25519"), ssh_local_port=free_port()
    )
    io = dataclasses.replace(rig.io, runner=runner, confirm=confirm)
    deploy_device(config, io)
    assert rig.phone.service == "run" and rig.phone.install_runs == 1
    assert (rig.phone.serial, f"tcp:{config.ssh_local_port}", "tcp:8022") in rig.adb.recorded.forwards
    assert any(c[0] == "scp" for c in calls)
    assert not any(cmd.startswith("run-as com.termux /") for _, cmd in rig.adb.recorded.shell)
    assert_only_real_commands(rig)


@pytest.mark.parametrize(
    ("phones", "serial", "message"),
    [
        ([], None, "no phone found"),
        ([FakePhone(state="unauthorized")], None, "unauthorised.*Allow USB debugging"),
        ([FakePhone(state="offline")], None, "offline.*replug"),
        ([FakePhone(serial="A1"), FakePhone(serial="B2")], None, "several phones attached: A1.*B2.*--serial"),
        ([FakePhone(serial="A1")], "Z9", "no phone with serial Z9"),
    ],
)
def test_phone_discovery_errors(rig: Rig, phones: list[FakePhone], serial: str | None, message: str) -> None:
    from edgellm.deploy.adb import AdbServer

    with FakeAdbServer(phones) as adb:  # type: ignore[arg-type]
        config = dataclasses.replace(rig.config, adb=AdbServer("127.0.0.1", adb.port), serial=serial)
        with pytest.raises(DeployError, match=message):
            deploy_device(config, rig.io)


def test_several_phones_with_serial_picks_one(rig: Rig) -> None:
    from edgellm.deploy.adb import AdbServer

    other = FakePhone(serial="OTHER")
    with FakeAdbServer([other, rig.phone]) as adb:
        config = dataclasses.replace(
            rig.config, adb=AdbServer("127.0.0.1", adb.port), serial=rig.phone.serial
        )
        deploy_device(config, rig.io)
    assert rig.phone.service == "run" and other.install_runs == 0


@pytest.mark.parametrize(
    ("installers", "message"),
    [
        ({}, "Termux is not installed"),
        ({"com.termux": "org.fdroid.fdroid", "com.termux.api": "null"}, "different sources"),
    ],
)
def test_termux_install_checks(rig: Rig, installers: dict[str, str], message: str) -> None:
    rig.phone.installers = installers
    with pytest.raises(DeployError, match=message):
        deploy_device(rig.config, rig.io)


def test_missing_plugins_only_warn(rig: Rig) -> None:
    rig.phone.installers = {"com.termux": "null"}  # GitHub APK, no plugins
    deploy_device(rig.config, rig.io)
    text = "\n".join(rig.output)
    assert "com.termux.boot is not installed" in text and "com.termux.api is not installed" in text


def test_real_resumable_push_through_the_forward(rig: Rig, tmp_path: Path) -> None:
    """After the deploy, the real push client reaches the (real) daemon through the fake's forward."""
    from edgellm.common.channel import ChannelSecurity, open_channel
    from edgellm.deploy.device import push_artifact
    from edgellm.v1 import device_pb2, device_pb2_grpc
    from tests.manifests import manifest_for

    deploy_device(rig.config, rig.io)
    art = tmp_path / "tiny"
    art.mkdir()
    data = b"not a real model, only bytes to push" * 1000
    (art / "weights.bin").write_bytes(data)
    (art / "manifest.json").write_text(manifest_for({"weights.bin": data}, "tiny").to_json())
    target = f"127.0.0.1:{rig.config.local_port}"
    token = rig.daemon.running.token
    assert token is not None
    # No flags: the token and the certificate the deploy fetched, from the host's config dir.
    found = ChannelSecurity.find(target=target)  # the per-address file the deploy wrote (L14)
    assert found.token == token
    artifact_id = push_artifact(target, art, found)
    with open_channel(target) as ch:
        status = device_pb2_grpc.DeviceDaemonStub(ch).GetArtifactStatus(
            device_pb2.GetArtifactStatusRequest(artifact_id=artifact_id), timeout=10
        )
    assert status.installed
    assert push_artifact(target, art, found) == artifact_id  # a second push sends nothing new
