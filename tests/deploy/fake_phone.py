"""A fake Android phone with Termux for the fake adb server: answers the shell commands deploy uses.

Only commands a real phone accepts are answered; anything else gets the shell's "not found" (127)
and is kept in `unknown`, so a test can assert the deploy issued nothing a phone would reject.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from edgellm.deploy.channel import BASH, HOME, PREFIX, PROLOGUE_MARKER
from edgellm.deploy.flow import CERT_PATH, CONSTRAINED_PATH, DAEMON_LOG, SERVICE_START, STAMP_PATH, TOKEN_PATH
from edgellm.deploy.phone_gateway import GATEWAY_KEY_PATH, GATEWAY_SERVICE

SERVICE_DIR = f"{PREFIX}/var/service/edgellm"
GATEWAY_SERVICE_DIR = f"{PREFIX}/var/service/{GATEWAY_SERVICE}"
GATEWAY_START = SERVICE_START + f"sv-enable {GATEWAY_SERVICE} >/dev/null 2>&1; sv restart {GATEWAY_SERVICE}"
BOOT_SCRIPT = f"{HOME}/.termux/boot/start-edgellm"


@dataclass
class FakePhone:
    serial: str = "FAKE0001"
    state: str = "device"
    sdk: int = 34
    release: str = "14"
    model: str = "Pixel 8"
    debuggable: bool = True
    installers: dict[str, str] = field(
        default_factory=lambda: {
            "com.termux": "org.fdroid.fdroid",
            "com.termux.api": "org.fdroid.fdroid",
            "com.termux.boot": "org.fdroid.fdroid",
        }
    )
    ports: dict[int, int] = field(default_factory=dict)  # phone tcp port -> host port serving it
    files: dict[str, bytes] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    device_config: dict[str, str] = field(default_factory=dict)
    doze_whitelist: set[str] = field(default_factory=set)
    service: str = "absent"  # absent | down | run
    gateway_service: str = "absent"  # the same for edgellm-gateway (install.sh --gateway)
    gateway_key: str = ""  # what install.sh --gateway writes to ~/.config/edgellm/gateway-key
    gateway_restarts: int = 0
    daemon_token: str = ""  # what install.sh writes to ~/.edgellm/token (the real daemon's token)
    daemon_cert: str = ""  # what the daemon's first start writes to ~/.edgellm/tls/cert.pem (its real one)
    install_fails: bool = False
    constrained: str = "available"  # what install.sh records about llguidance
    install_runs: int = 0
    restarts: int = 0
    termux_scripts: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    # -- adb shell (the shell user) -----------------------------------------------------------
    def handle_shell(self, command: str) -> tuple[int, str, str]:
        props = {
            "ro.build.version.sdk": str(self.sdk),
            "ro.build.version.release": self.release,
            "ro.product.model": self.model,
        }
        if m := re.fullmatch(r"getprop ([\w.]+)", command):
            return 0, props.get(m.group(1), "") + "\n", ""
        if command.startswith("run-as com.termux "):
            return self._run_as(command)
        if command == "pm list packages -i com.termux":
            return 0, "".join(f"package:{p}  installer={i}\n" for p, i in self.installers.items()), ""
        if command == 'dumpsys package com.termux | grep -E "versionName|flags"':
            flags = "HAS_CODE ALLOW_CLEAR_USER_DATA ALLOW_BACKUP" + (" DEBUGGABLE" if self.debuggable else "")
            return 0, f"    versionName=0.118.3\n    flags=[ {flags} ]\n    pkgFlags=[ {flags} ]\n", ""
        if m := re.fullmatch(
            r"settings (get|put) global (settings_enable_monitor_phantom_procs)( \w+)?", command
        ):
            if m.group(1) == "put" and self.sdk >= 32:
                self.settings[m.group(2)] = m.group(3).strip()
                return 0, "", ""
            return 0, self.settings.get(m.group(2), "null") + "\n", ""
        if m := re.fullmatch(
            r"device_config (get|put) activity_manager max_phantom_processes( \d+)?", command
        ):
            if self.sdk < 31:
                return 255, "", "Unknown command\n"
            if m.group(1) == "put":
                self.device_config["max_phantom_processes"] = m.group(2).strip()
                return 0, "", ""
            return 0, self.device_config.get("max_phantom_processes", "null") + "\n", ""
        if command == "device_config set_sync_disabled_for_tests persistent" and self.sdk >= 31:
            return 0, "", ""
        if command == "dumpsys deviceidle whitelist":
            lines = ["system-excidle,com.android.shell,2000"]
            lines += [f"user,{p},10234" for p in sorted(self.doze_whitelist)]
            return 0, "\n".join(lines) + "\n", ""
        if m := re.fullmatch(r"dumpsys deviceidle whitelist \+([\w.]+)", command):
            self.doze_whitelist.add(m.group(1))
            return 0, f"Added: {m.group(1)}\n", ""
        if command == "mkdir -p /data/local/tmp/edgellm && chmod 755 /data/local/tmp/edgellm":
            return 0, "", ""
        self.unknown.append(command)
        return 127, "", f"/system/bin/sh: {command.split()[0]}: inaccessible or not found\n"

    def _run_as(self, command: str) -> tuple[int, str, str]:
        if not self.debuggable:
            return 1, "", "run-as: package not debuggable: com.termux\n"
        argv = shlex.split(command)
        if argv[2:] == ["id", "-u"]:
            return 0, "10234\n", ""
        if argv[2:4] != [BASH, "-c"] or len(argv) != 5:
            self.unknown.append(command)
            return 127, "", "run-as: exec failed\n"
        return self.termux(argv[4])

    # -- inside Termux (run-as or sshd) -------------------------------------------------------
    def termux(self, full_script: str) -> tuple[int, str, str]:
        """Run a script the deploy sends to Termux (after its environment prologue)."""
        if PROLOGUE_MARKER + "\n" not in full_script:
            self.unknown.append(full_script)
            return 127, "", "no prologue\n"
        script = full_script.split(PROLOGUE_MARKER + "\n", 1)[1]
        self.termux_scripts.append(script)
        if script == "true":
            return 0, "", ""
        if m := re.fullmatch(r"sha256sum (.+) 2>/dev/null; true", script):
            out = "".join(
                f"{hashlib.sha256(self.files[p]).hexdigest()}  {p}\n"
                for p in shlex.split(m.group(1))
                if p in self.files
            )
            return 0, out, ""
        if m := re.fullmatch(r"mkdir -p (\S+) && cp (\S+) (\S+)", script):
            src, dst = m.group(2), shlex.split(m.group(3))[0]
            if src not in self.files:
                return 1, "", f"cp: {src}: No such file or directory\n"
            self.files[dst] = self.files[src]
            return 0, "", ""
        if re.fullmatch(r"mkdir -p \S+", script):
            return 0, "", ""
        if m := re.fullmatch(r"cat (\S+) 2>/dev/null; true", script):
            return 0, self.files.get(shlex.split(m.group(1))[0], b"").decode(), ""
        if m := re.fullmatch(
            r"mkdir -p \S+ && bash (\S+)/install\.sh --wheel (\S+) --stamp (\w+)( --gateway)? 2>&1 "
            r"\| tee \S+; exit \$\{PIPESTATUS\[0\]\}",
            script,
        ):
            return self._install(m.group(1), m.group(2), m.group(3), bool(m.group(4)))
        if script == "sv status edgellm":
            return self._sv_status()
        if script == f"sv status {GATEWAY_SERVICE}":
            return self._gateway_status()
        if script == GATEWAY_START:
            if self.gateway_service == "absent":
                return 1, "", f"fail: {GATEWAY_SERVICE}: unable to change to service directory\n"
            self.gateway_service = "run"
            self.gateway_restarts += 1
            return 0, f"ok: run: {GATEWAY_SERVICE}: (pid 4343) 0s\n", ""
        if script == f"sv restart {GATEWAY_SERVICE}" and self.gateway_service != "absent":
            self.gateway_service = "run"
            self.gateway_restarts += 1
            return 0, f"ok: run: {GATEWAY_SERVICE}: (pid 4444) 0s\n", ""
        if script == "edgellm token rotate --daemon":
            self.files[TOKEN_PATH] = b"rotated-daemon-token\n"
            return 0, "rotated the daemon's token\n", ""
        if script == f"sv down {GATEWAY_SERVICE}":
            self.gateway_service = "down" if self.gateway_service != "absent" else "absent"
            return 0, f"ok: down: {GATEWAY_SERVICE}: 0s\n", ""
        if script == SERVICE_START + "sv restart edgellm":
            if self.service == "absent":
                return 1, "", "fail: edgellm: unable to change to service directory: file does not exist\n"
            self.service = "run"
            self.restarts += 1
            return 0, "ok: run: edgellm: (pid 4242) 0s\n", ""
        if script == "sv down edgellm":
            self.service = "down" if self.service != "absent" else "absent"
            return 0, "ok: down: edgellm: 0s\n", ""
        if m := re.fullmatch(r"printf '%s\\n' (\S+) > (\S+)", script):
            self.files[m.group(2)] = (shlex.split(m.group(1))[0] + "\n").encode()
            return 0, "", ""
        if m := re.fullmatch(r"tail -n (\d+) (\S+) 2>/dev/null; true", script):
            text = self.files.get(m.group(2), b"").decode().splitlines()[-int(m.group(1)) :]
            return 0, "".join(line + "\n" for line in text), ""
        if "sv-disable edgellm" in script and "pip uninstall -y edgellm" in script:
            self.service = "absent"
            self.gateway_service = "absent"
            removed = (SERVICE_DIR + "/", GATEWAY_SERVICE_DIR + "/", BOOT_SCRIPT, f"{HOME}/.edgellm/deploy")
            for path in [p for p in self.files if p.startswith(removed)]:
                del self.files[path]
            return 0, "", ""
        self.unknown.append(script)
        return 127, "", f"bash: {script.split()[0]}: command not found\n"

    def _install(self, deploy_dir: str, wheel: str, stamp: str, gateway: bool) -> tuple[int, str, str]:
        self.install_runs += 1
        if f"{deploy_dir}/install.sh" not in self.files or wheel not in self.files:
            return 1, "bash: install.sh: No such file or directory\n", ""
        if self.install_fails:
            return 3, "[edgellm-install] FAILED: MNN build\n[edgellm-install] full log: mnn-build.log\n", ""
        for name, dst in (("run", f"{SERVICE_DIR}/run"), ("log-run", f"{SERVICE_DIR}/log/run")):
            self.files[dst] = self.files[f"{deploy_dir}/{name}"]
        self.files[BOOT_SCRIPT] = self.files[f"{deploy_dir}/start-edgellm"]
        self.files[STAMP_PATH] = (stamp + "\n").encode()
        self.files[CONSTRAINED_PATH] = (self.constrained + "\n").encode()
        self.files.setdefault(TOKEN_PATH, (self.daemon_token + "\n").encode())
        if self.daemon_cert:  # the real daemon's first start made it (the fake's service "starts" it)
            self.files.setdefault(CERT_PATH, self.daemon_cert.encode())
        self.files.setdefault(DAEMON_LOG, b"2026-12-02 daemon_listening port=50051\n")
        if self.service == "absent":
            self.service = "down"
        if gateway:
            for name, dst in (("gateway-run", "run"), ("gateway-log-run", "log/run")):
                self.files[f"{GATEWAY_SERVICE_DIR}/{dst}"] = self.files[f"{deploy_dir}/{name}"]
            self.files.setdefault(GATEWAY_KEY_PATH, (self.gateway_key + "\n").encode())
            if self.gateway_service == "absent":
                self.gateway_service = "down"
        return 0, "[edgellm-install] done\n", ""

    def _sv_status(self) -> tuple[int, str, str]:
        if self.service == "run":
            return 0, "run: edgellm: (pid 4242) 12s; run: log: (pid 4241) 12s\n", ""
        if self.service == "down":
            return 0, "down: edgellm: 3s, normally up; run: log: (pid 4241) 12s\n", ""
        return 1, "fail: edgellm: unable to change to service directory: file does not exist\n", ""

    def _gateway_status(self) -> tuple[int, str, str]:
        if self.gateway_service in ("run", "down"):
            state = f"{self.gateway_service}: {GATEWAY_SERVICE}: (pid 4343) 5s"
            return 0, f"{state}; run: log: (pid 4342) 5s\n", ""
        return 1, f"fail: {GATEWAY_SERVICE}: unable to change to service directory: file does not exist\n", ""

    def read(self, path: str) -> bytes:
        return self.files[path]


def fake_wheel(tmp: Path, version: str = "0.1.0", payload: bytes = b"wheel-bytes") -> Path:
    """A stand-in wheel file (the deploy only copies it; the installer test covers pip)."""
    path = tmp / f"edgellm-{version}-py3-none-any.whl"
    path.write_bytes(payload)
    return path
