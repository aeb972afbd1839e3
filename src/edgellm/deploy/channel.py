"""How the host runs commands as the Termux user: `run-as` on debuggable builds, else sshd on 8022."""

from __future__ import annotations

import base64
import hashlib
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from edgellm.common.logs import get_logger
from edgellm.deploy.adb import DeployError, Phone, ShellResult

log = get_logger(__name__)

TERMUX_PACKAGE = "com.termux"
PREFIX = "/data/data/com.termux/files/usr"
HOME = "/data/data/com.termux/files/home"
BASH = f"{PREFIX}/bin/bash"
STAGING = "/data/local/tmp/edgellm"  # writable by adb's shell user, readable by run-as
SSH_PORT = 8022
PUBKEY_ON_PHONE = "/sdcard/Download/edgellm_id_ed25519.pub"
PUBKEY_COPY = "~/.ssh/edgellm_id_ed25519.pub"  # Termux's private copy: checked and appended (L6)

# Why a prologue: neither `run-as` nor a non-login ssh session sets Termux's environment, and
# Termux binaries (pkg, pip, sv) need PREFIX, PATH and termux-exec's LD_PRELOAD for shebangs;
# /system/bin comes last on PATH for toybox tools Termux may lack (setsid).
# The fake adb server strips everything up to and including the marker line.
PROLOGUE_MARKER = "# edgellm-termux-env"
PROLOGUE = (
    f"export HOME={HOME} PREFIX={PREFIX} PATH={PREFIX}/bin:/system/bin TMPDIR={PREFIX}/tmp "
    f"LANG=en_US.UTF-8 SVDIR={PREFIX}/var/service LOGDIR={PREFIX}/var/log; "
    f'for l in "$PREFIX/lib/libtermux-exec-ld-preload.so" "$PREFIX/lib/libtermux-exec.so"; do '
    f'[ -f "$l" ] && export LD_PRELOAD="$l" && break; done; cd "$HOME" || exit 1\n{PROLOGUE_MARKER}\n'
)


def termux_script(script: str) -> str:
    """SCRIPT preceded by the Termux environment prologue."""
    return PROLOGUE + script


class Channel(Protocol):
    """Runs bash scripts as the Termux user and copies files into Termux's home."""

    name: str

    def run(self, script: str, timeout: float = 120.0) -> ShellResult:
        """Run SCRIPT with bash inside Termux's environment."""
        ...

    def put(self, src: Path, dst: str) -> None:
        """Copy a host file to the absolute Termux path DST."""
        ...


class RunAsChannel:
    """`adb shell run-as com.termux bash -c ...`: only works on debuggable Termux builds."""

    name = "run-as"

    def __init__(self, phone: Phone) -> None:
        self.phone = phone
        self._staging_ready = False

    def command(self, script: str) -> str:
        """The adb shell command line that runs SCRIPT as the Termux user."""
        return f"run-as {TERMUX_PACKAGE} {BASH} -c {shlex.quote(termux_script(script))}"

    def run(self, script: str, timeout: float = 120.0) -> ShellResult:
        """Run SCRIPT as the Termux user."""
        return self.phone.shell(self.command(script), timeout=timeout)

    def put(self, src: Path, dst: str) -> None:
        """adb push to a staging dir, then `cp` from it as the Termux user."""
        if not self._staging_ready:
            self.phone.shell(f"mkdir -p {STAGING} && chmod 755 {STAGING}")
            self._staging_ready = True
        staged = f"{STAGING}/{dst.rsplit('/', 1)[-1]}"
        self.phone.push(src, staged, mode=0o644)
        dst_dir = dst.rsplit("/", 1)[0]
        r = self.run(f"mkdir -p {shlex.quote(dst_dir)} && cp {shlex.quote(staged)} {shlex.quote(dst)}")
        if not r.ok:
            raise DeployError(f"could not copy {src.name} into Termux: {r.stdout}{r.stderr}")


def run_as_works(phone: Phone) -> bool:
    """True when `run-as com.termux` is allowed (a debuggable Termux build)."""
    return phone.shell(f"run-as {TERMUX_PACKAGE} id -u").ok


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_host(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run a host command (ssh, scp, ssh-keygen, pip) and capture its output."""
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=7200)


@dataclass(frozen=True)
class SshKeys:
    """The host key pair the deploy uses to log in to Termux's sshd."""

    private: Path

    @property
    def public(self) -> Path:
        """The .pub file beside the private key."""
        return self.private.with_name(self.private.name + ".pub")

    @property
    def known_hosts(self) -> Path:
        """A known_hosts file used only for the phone (its forwarded port changes between runs)."""
        return self.private.with_name("known_hosts")


class SshChannel:
    """Termux's sshd on 8022 reached through `adb forward tcp:LOCAL tcp:8022`."""

    name = "ssh"

    def __init__(self, keys: SshKeys, local_port: int, runner: Runner = run_host) -> None:
        self.keys = keys
        self.local_port = local_port
        self.runner = runner

    def _opts(self) -> list[str]:
        return [
            "-i",
            str(self.keys.private),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-o",
            f"UserKnownHostsFile={self.keys.known_hosts}",
        ]

    def run(self, script: str, timeout: float = 120.0) -> ShellResult:
        """Run SCRIPT over ssh (the script is one argument; sshd hands it to the login shell)."""
        remote = f"bash -c {shlex.quote(termux_script(script))}"
        argv = ["ssh", "-p", str(self.local_port), *self._opts(), "127.0.0.1", remote]
        p = self.runner(argv)
        return ShellResult(remote, p.returncode, p.stdout, p.stderr)

    def put(self, src: Path, dst: str) -> None:
        """scp the file (after making its directory)."""
        # Why a character check rather than shlex.quote (finding S19): legacy-protocol scp (-O)
        # hands the remote path to the remote shell, but SFTP-mode scp (OpenSSH 9+) takes it
        # literally, so quotes would become part of the name; a path that needs no quoting is
        # read the same by both.
        if not dst or shlex.quote(dst) != dst:
            raise DeployError(
                f"refusing to scp to {dst!r}: remote paths may only use letters, digits and @%+=:,./-_ "
                "(rename the file)"
            )
        self.run(f"mkdir -p {shlex.quote(dst.rsplit('/', 1)[0])}")
        argv = ["scp", "-P", str(self.local_port), *self._opts(), str(src), f"127.0.0.1:{dst}"]
        p = self.runner(argv)
        if p.returncode != 0:
            raise DeployError(f"scp of {src.name} failed: {p.stderr.strip()}")


# Why the fingerprint check: the public key waits on shared storage, where any app with storage
# access could swap in its own key before the user appends it (finding S18). So Termux first
# copies it into its private ~/.ssh, the user compares the fingerprint of that copy with this one,
# and the copy is what gets appended: a swap after the check changes nothing (finding L6). sshd
# listens on loopback only: the host reaches it through `adb forward`, and no one on the Wi-Fi can.
SSH_SETUP_HELP = """\
This Termux build is not debuggable, so the host drives it through Termux's own sshd.
One-time setup: open Termux on the phone and type these lines:

    termux-setup-storage; pkg install -y openssh && mkdir -p ~/.ssh && chmod 700 ~/.ssh && \\
    cp {pubkey} {copy} && ssh-keygen -lf {copy}

It must print this fingerprint (if it differs, another app replaced the key: stop here):

    {fingerprint}

Then append that checked copy, start sshd on loopback only, and come back and press Enter:

    cat {copy} >> ~/.ssh/authorized_keys && chmod 600 ~/.ssh/authorized_keys && \\
    echo 'ListenAddress 127.0.0.1' >> $PREFIX/etc/ssh/sshd_config && sshd
"""


def key_fingerprint(public_key_line: str) -> str:
    """'SHA256:…' of an OpenSSH public key line, as `ssh-keygen -lf` prints it."""
    blob = base64.b64decode(public_key_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def ensure_ssh_keys(keys: SshKeys, runner: Runner = run_host) -> None:
    """Create the host's ed25519 key pair once."""
    if keys.private.exists():
        return
    keys.private.parent.mkdir(parents=True, exist_ok=True)
    p = runner(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edgellm-deploy", "-f", str(keys.private)]
    )
    if p.returncode != 0:
        raise DeployError(f"ssh-keygen failed: {p.stderr.strip()}")


def open_ssh_channel(
    phone: Phone,
    keys: SshKeys,
    local_port: int,
    confirm: Callable[[str], bool],
    runner: Runner = run_host,
) -> SshChannel:
    """Forward to sshd, and if login fails, install the key once with the user's help."""
    phone.forward(local_port, f"tcp:{SSH_PORT}")
    channel = SshChannel(keys, local_port, runner)
    if channel.run("true").ok:
        return channel
    ensure_ssh_keys(keys, runner)
    phone.push(keys.public, PUBKEY_ON_PHONE, mode=0o644)
    fingerprint = key_fingerprint(keys.public.read_text())
    if not confirm(SSH_SETUP_HELP.format(pubkey=PUBKEY_ON_PHONE, copy=PUBKEY_COPY, fingerprint=fingerprint)):
        raise DeployError("ssh setup declined; see docs/deploy.md, 'Non-debuggable Termux'")
    if not channel.run("true").ok:
        raise DeployError(
            f"cannot log in to Termux's sshd on port {SSH_PORT}: is `sshd` running in Termux and "
            f"{PUBKEY_COPY} appended to ~/.ssh/authorized_keys?"
        )
    log.info("ssh_channel_ready", port=local_port)
    return channel
