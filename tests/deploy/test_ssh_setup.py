"""The sshd bootstrap for non-debuggable Termux (findings S18, L6, S19): what the user is told to
type is run in a real bash against a Termux-like home, with the key on "shared storage" swapped by
a hostile app between the fingerprint check and the append; real ssh-keygen, the fake adb server."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from edgellm.deploy.adb import DeployError, connect
from edgellm.deploy.channel import (
    PUBKEY_ON_PHONE,
    SshChannel,
    SshKeys,
    key_fingerprint,
    open_ssh_channel,
    run_host,
)
from tests.deploy.conftest import Rig, free_port

# Termux commands the host has no use for here: the storage grant, the package manager, sshd itself.
STUBS = "termux-setup-storage() { :; }; pkg() { :; }; sshd() { :; }\n"


def _keygen(path: Path) -> None:
    run_host(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "x", "-f", str(path)]).check_returncode()


def _blocks(help_text: str) -> list[str]:
    """The indented command blocks of the printed instructions (continuation lines joined)."""
    blocks = re.findall(r"(?:^    \S.*\n?)+", help_text, flags=re.MULTILINE)
    return [b.replace("\\\n", " ").replace("\n", " ").strip() for b in blocks]


def test_s18_l6_the_user_checks_and_appends_a_private_copy_so_a_later_swap_changes_nothing(
    rig: Rig, tmp_path: Path
) -> None:
    rig.phone.debuggable = False
    keys = SshKeys(tmp_path / "host-ssh" / "id_ed25519")
    shown: list[str] = []
    logged_in = {"ok": False}

    def runner(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if argv[0] == "ssh-keygen":  # the real one
            return run_host(argv)
        assert argv[0] == "ssh"
        return subprocess.CompletedProcess(argv, 0 if logged_in["ok"] else 255, "", "denied")

    home, prefix, sdcard = tmp_path / "home", tmp_path / "usr", tmp_path / "sdcard"
    (prefix / "etc" / "ssh").mkdir(parents=True)
    home.mkdir()
    sdcard.mkdir()
    hostile = tmp_path / "hostile"
    _keygen(hostile)

    def confirm(text: str) -> bool:
        shown.append(text)
        check, append = _blocks(text)[0], _blocks(text)[2]
        fingerprint = _blocks(text)[1]
        # The user's Termux: the pushed key is where adb put it (shared storage, here a temp dir).
        shared = sdcard / "edgellm_id_ed25519.pub"
        shared.write_bytes(rig.phone.files[PUBKEY_ON_PHONE])
        env = {"HOME": str(home), "PREFIX": str(prefix), "PATH": "/usr/bin:/bin"}

        def termux(line: str) -> str:
            script = STUBS + line.replace(PUBKEY_ON_PHONE, str(shared))
            p = subprocess.run(["bash", "-ec", script], env=env, capture_output=True, text=True, check=True)
            return p.stdout

        assert fingerprint in termux(check)  # ssh-keygen -lf prints the shown fingerprint
        shared.write_bytes((hostile.with_name("hostile.pub")).read_bytes())  # an app swaps the file now
        termux(append)
        logged_in["ok"] = True
        return True

    phone = connect(rig.phone.serial, rig.config.adb)
    open_ssh_channel(phone, keys, free_port(), confirm, runner)
    [text] = shown
    assert key_fingerprint(keys.public.read_text()) in text
    authorized = (home / ".ssh" / "authorized_keys").read_text()
    assert authorized == keys.public.read_text()  # the checked copy, not the swapped file
    assert (prefix / "etc" / "ssh" / "sshd_config").read_text() == "ListenAddress 127.0.0.1\n"
    assert "ListenAddress 127.0.0.1" in text
    assert (home / ".ssh").stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("dst", ["/data/x y.whl", "/data/$(reboot).whl", "/data/a;b", "/data/`id`", ""])
def test_s19_scp_refuses_a_remote_path_a_shell_would_read_differently(tmp_path: Path, dst: str) -> None:
    calls: list[list[str]] = []

    def runner(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "", "")

    channel = SshChannel(SshKeys(tmp_path / "id"), 1, runner)
    src = tmp_path / "w.whl"
    src.write_bytes(b"w")
    with pytest.raises(DeployError, match="refusing to scp"):
        channel.put(src, dst)
    assert calls == []  # nothing ran: neither the mkdir nor the copy
    channel.put(src, "/data/data/com.termux/files/home/.edgellm/edgellm-0.1.0-py3-none-any.whl")
    assert (
        calls[-1][-1] == "127.0.0.1:/data/data/com.termux/files/home/.edgellm/edgellm-0.1.0-py3-none-any.whl"
    )
