"""`edgellm deploy device --gateway` against the fake adb server and fake Termux phone, with a real
gateway (in front of the real stand-in daemon) answering on the phone's gateway port."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgellm.common.channel import ChannelSecurity
from edgellm.common.tls import ClientTls
from edgellm.deploy.device import (
    deploy_device,
    deploy_rotate_token,
    deploy_status,
    deploy_stop,
    deploy_uninstall,
)
from edgellm.deploy.flow import STAMP_PATH
from edgellm.deploy.phone_gateway import GATEWAY_KEY_PATH, GATEWAY_PORT, read_key_command
from edgellm.gateway.config import GatewayConfig
from edgellm.gateway.server import RunningGateway, start_gateway
from tests.deploy.conftest import Rig, ThreadDaemon, free_port
from tests.deploy.fake_phone import GATEWAY_SERVICE_DIR
from tests.deploy.test_deploy_flow import ADB_SERVICES, assert_only_real_commands

PHONE_KEY = "phone-gateway-key-made-in-termux"


@pytest.fixture(scope="module")
def phone_gateway(phone_daemon: ThreadDaemon) -> Iterator[RunningGateway]:
    """The gateway the phone's service would run: the daemon's token, TLS to its certificate, a key."""
    running = phone_daemon.running
    assert running.security.tls is not None
    config = GatewayConfig(
        target=f"127.0.0.1:{running.port}",
        daemon_security=ChannelSecurity(
            running.token, "phone token", ClientTls(roots=running.security.tls.cert.read_bytes())
        ),
        port=0,
        api_key=PHONE_KEY,
    )
    gateway = asyncio.run_coroutine_threadsafe(start_gateway(config), phone_daemon.loop).result(30)
    yield gateway
    asyncio.run_coroutine_threadsafe(gateway.stop(), phone_daemon.loop).result(10)


@pytest.fixture
def gateway_rig(rig: Rig, phone_gateway: RunningGateway, monkeypatch: pytest.MonkeyPatch) -> Rig:
    rig.phone.ports[GATEWAY_PORT] = phone_gateway.port
    rig.phone.gateway_key = PHONE_KEY
    # The forward to the phone's gateway port is one more adb service the deploy uses.
    monkeypatch.setattr(
        "tests.deploy.test_deploy_flow.ADB_SERVICES",
        [*ADB_SERVICES, rf"host-serial:\S+:forward:tcp:\d+;tcp:{GATEWAY_PORT}"],
    )
    rig.config = dataclasses.replace(rig.config, gateway=True, gateway_port=free_port())
    return rig


def test_deploy_with_gateway_installs_starts_forwards_and_checks_it_keeping_the_key_on_the_phone(
    gateway_rig: Rig, tmp_path: Path
) -> None:
    rig, config = gateway_rig, gateway_rig.config
    reports = deploy_device(config, rig.io)
    assert [(r.name, r.outcome) for r in reports][-2:] == [("gateway", "done"), ("gateway forward", "done")]
    phone = rig.phone
    # The installer ran with --gateway: the service scripts are in place and the key was made there.
    assert any("install.sh --wheel" in s and " --gateway " in s for s in phone.termux_scripts)
    assert f"{GATEWAY_SERVICE_DIR}/run" in phone.files and f"{GATEWAY_SERVICE_DIR}/log/run" in phone.files
    assert phone.files[GATEWAY_KEY_PATH].decode().strip() == PHONE_KEY
    assert phone.gateway_service == "run" and phone.gateway_restarts == 1
    assert (phone.serial, f"tcp:{config.gateway_port}", f"tcp:{GATEWAY_PORT}") in rig.adb.recorded.forwards
    # The gateway's health went through the forward: up, no model on the stand-in daemon.
    text = "\n".join(rig.output)
    assert f"gateway reachable at http://127.0.0.1:{config.gateway_port}: up, HTTP 503" in text
    # Where the key is and how to read it; the key itself never reached the host.
    assert f"run-as com.termux cat {GATEWAY_KEY_PATH}" in text
    assert PHONE_KEY not in text
    host_files = [p for p in (tmp_path / "host-config").rglob("*") if p.is_file()]
    assert host_files and all(PHONE_KEY not in p.read_text() for p in host_files)
    # Through the forward the gateway refuses a caller without the key and serves one with it.
    models = f"http://127.0.0.1:{config.gateway_port}/v1/models"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(models, timeout=10)
    assert refused.value.code == 401
    keyed = urllib.request.Request(models, headers={"Authorization": f"Bearer {PHONE_KEY}"})
    with urllib.request.urlopen(keyed, timeout=10) as reply:
        assert json.loads(reply.read())["object"] == "list"
    assert_only_real_commands(rig)

    # Re-run: nothing to do, the gateway is not restarted.
    reports = deploy_device(config, rig.io)
    assert {r.outcome for r in reports} == {"skipped"}
    assert phone.gateway_restarts == 1 and phone.install_runs == 1


def test_adding_the_gateway_to_a_daemon_only_phone_reinstalls_once(gateway_rig: Rig) -> None:
    rig = gateway_rig
    deploy_device(dataclasses.replace(rig.config, gateway=False), rig.io)
    plain_stamp = rig.phone.files[STAMP_PATH]
    assert rig.phone.gateway_service == "absent" and GATEWAY_KEY_PATH not in rig.phone.files
    reports = {r.name: r.outcome for r in deploy_device(rig.config, rig.io)}
    assert reports["files"] == "done" and reports["install"] == "done" and reports["gateway"] == "done"
    assert rig.phone.files[STAMP_PATH] != plain_stamp and rig.phone.install_runs == 2
    assert rig.phone.gateway_service == "run"


def test_status_stop_and_uninstall_cover_the_gateway(gateway_rig: Rig) -> None:
    rig = gateway_rig
    deploy_device(rig.config, rig.io)
    assert deploy_status(rig.config, rig.io)["gateway"].startswith("run: edgellm-gateway")
    deploy_stop(rig.config, rig.io)
    assert rig.phone.gateway_service == "down"
    assert (rig.phone.serial, rig.config.gateway_port) not in rig.adb.forwards
    deploy_uninstall(rig.config, rig.io)
    assert rig.phone.gateway_service == "absent"
    assert not any(p.startswith(GATEWAY_SERVICE_DIR) for p in rig.phone.files)
    assert deploy_status(rig.config, rig.io)["gateway"] == "not installed"
    assert_only_real_commands(rig)


def test_dry_run_says_the_key_stays_on_the_phone(gateway_rig: Rig) -> None:
    deploy_device(dataclasses.replace(gateway_rig.config, dry_run=True), gateway_rig.io)
    text = "\n".join(gateway_rig.output)
    assert "gateway: would run" in text and "gateway forward: would run" in text
    assert f"gateway key: stays on the phone in {GATEWAY_KEY_PATH}" in text
    assert gateway_rig.phone.install_runs == 0


def test_the_key_is_read_over_the_channel_the_deploy_used() -> None:
    run_as = read_key_command("run-as", "R5CT", 58022, Path("/k"))
    assert run_as == f"adb -s R5CT shell run-as com.termux cat {GATEWAY_KEY_PATH}"
    assert (
        read_key_command("ssh", "R5CT", 58022, Path("/k"))
        == f"ssh -p 58022 -i /k 127.0.0.1 cat {GATEWAY_KEY_PATH}"
    )


def test_rotating_the_daemon_token_restarts_the_gateway_that_holds_it(gateway_rig: Rig) -> None:
    """The phone's gateway reads the daemon's token at start; the daemon refuses the old one at once."""
    rig = gateway_rig
    deploy_device(rig.config, rig.io)
    assert rig.phone.gateway_restarts == 1
    deploy_rotate_token(rig.config, rig.io)
    assert rig.config.token_path().read_text().strip() == "rotated-daemon-token"
    assert rig.phone.gateway_restarts == 2 and rig.phone.gateway_service == "run"
    assert "restarted the phone's gateway" in rig.output[-1]
    assert_only_real_commands(rig)
