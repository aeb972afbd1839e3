"""The one adapter around adbutils: find the phone, run shell commands, push files, forward ports."""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgellm.common.logs import get_logger

log = get_logger(__name__)


class DeployError(RuntimeError):
    """A deploy step failed in a way the user can act on; the message says how."""


@dataclass(frozen=True)
class ShellResult:
    """Exit status and output of one `adb shell` command."""

    command: str
    returncode: int
    stdout: str
    stderr: str = ""

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.returncode == 0


@dataclass(frozen=True)
class AdbServer:
    """Where the adb server listens (adbutils' defaults honour $ANDROID_ADB_SERVER_PORT)."""

    host: str | None = None
    port: int | None = None

    def address(self) -> tuple[str, int]:
        """host and port as adbutils resolves them ($ANDROID_ADB_SERVER_HOST/PORT, else 127.0.0.1:5037)."""
        host = self.host or os.environ.get("ANDROID_ADB_SERVER_HOST", "127.0.0.1")
        port = self.port or int(os.environ.get("ANDROID_ADB_SERVER_PORT", "5037"))
        return host, port

    def running(self) -> bool:
        """Whether something accepts connections there (a plain connect: starts nothing)."""
        try:
            with socket.create_connection(self.address(), timeout=2.0):
                return True
        except OSError:
            return False


_STATE_HELP = {
    "unauthorized": (
        "phone {serial} is unauthorised: unlock it and accept the 'Allow USB debugging?' prompt "
        "(tick 'Always allow'), then re-run"
    ),
    "offline": (
        "phone {serial} is offline: unplug and replug the cable, or run `adb kill-server`, then re-run"
    ),
    "no permissions": (
        "no permission to open phone {serial}'s USB device: add a udev rule for it "
        "(see docs/deploy.md, 'Troubleshooting')"
    ),
}


class Phone:
    """One phone reached through the adb server; every call is a real adb service."""

    def __init__(self, device: Any, serial: str) -> None:
        self._device = device
        self.serial = serial

    def shell(self, command: str, timeout: float = 120.0) -> ShellResult:
        """Run `adb shell COMMAND` and return its exit status and output."""
        from adbutils import AdbError

        try:
            r = self._device.shell2(command, timeout=timeout, v2=True)
        except (AdbError, OSError, EOFError) as e:
            raise DeployError(f"adb shell failed on {self.serial}: {e}") from e
        log.debug("adb_shell", serial=self.serial, command=command, rc=r.returncode)
        return ShellResult(command, r.returncode, r.stdout, r.stderr)

    def getprop(self, name: str) -> str:
        """One system property (empty when unset)."""
        return self.shell(f"getprop {name}").stdout.strip()

    def push(self, src: Path, dst: str, mode: int = 0o644) -> int:
        """Push one file; raise DeployError (retryable) if the connection drops."""
        from adbutils import AdbError

        try:
            return int(self._device.sync.push(src, dst, mode=mode, check=True))
        except (AdbError, OSError, EOFError) as e:
            raise DeployError(f"push of {src.name} to {self.serial}:{dst} failed: {e}") from e

    def forward(self, local_port: int, remote: str) -> None:
        """`adb forward tcp:LOCAL REMOTE` (rebinding an existing rule)."""
        self._device.forward(f"tcp:{local_port}", remote)

    def forwards(self) -> dict[int, str]:
        """This phone's forward rules as {local tcp port: remote}."""
        out: dict[int, str] = {}
        for item in self._device.forward_list():
            if item.serial == self.serial and item.local.startswith("tcp:"):
                out[int(item.local[4:])] = item.remote
        return out

    def remove_forward(self, local_port: int) -> None:
        """`adb forward --remove tcp:LOCAL`, ignoring a rule that is already gone."""
        self._device.forward_remove(f"tcp:{local_port}", raise_non_found=False)


def connect(serial: str | None, server: AdbServer = AdbServer(), start_server: bool = True) -> Phone:
    """The one ready phone (by serial, or the only one attached), with a clear error otherwise.

    start_server=False (dry runs) never starts an adb server: adbutils would run `adb start-server`
    when none listens, leaving a daemon behind on a machine the user only wanted to inspect.
    """
    import adbutils

    if not start_server and not server.running():
        host, port = server.address()
        raise DeployError(
            f"no adb server is running at {host}:{port}, so no phone can be listed; a dry run starts "
            "nothing: run `adb start-server` (or deploy without --dry-run) and attach the phone"
        )

    client = adbutils.AdbClient(host=server.host, port=server.port)
    try:
        infos = client.list(extended=True)
    except (adbutils.AdbError, OSError, subprocess.SubprocessError) as e:
        # Why OSError/SubprocessError: with no server listening, adbutils runs `adb start-server`.
        raise DeployError(
            f"cannot reach the adb server ({e}); install Android platform-tools and run `adb start-server`"
        ) from e
    if serial is not None:
        infos = [i for i in infos if i.serial == serial]
        if not infos:
            raise DeployError(f"no phone with serial {serial} (see `adb devices -l`)")
    if not infos:
        raise DeployError(
            "no phone found: plug it in, enable Developer options > USB debugging, "
            "and check `adb devices -l` lists it"
        )
    if len(infos) > 1:
        listing = ", ".join(f"{i.serial} ({i.state})" for i in infos)
        raise DeployError(f"several phones attached: {listing}; choose one with --serial")
    info = infos[0]
    if info.state != "device":
        template = _STATE_HELP.get(info.state, "phone {serial} is in state '{state}', not 'device'")
        raise DeployError(template.format(serial=info.serial, state=info.state))
    log.info("phone_found", serial=info.serial, model=info.tags.get("model", ""))
    return Phone(client.device(info.serial), info.serial)
