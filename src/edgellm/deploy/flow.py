"""The deploy as an idempotent plan of steps: each checks whether it is done before it acts."""

from __future__ import annotations

import hashlib
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgellm.common.logs import get_logger
from edgellm.common.pins import TrustedCert, diagnose
from edgellm.common.tls import ClientTls
from edgellm.common.tokens import write_secret
from edgellm.deploy.adb import DeployError, Phone
from edgellm.deploy.channel import HOME, PREFIX, Channel
from edgellm.deploy.probe import KeepAlive, PhoneFacts, keepalive_fix_commands, keepalive_status

log = get_logger(__name__)

TERMUX_DIR = Path(__file__).resolve().parent / "termux"
REMOTE_DIR = f"{HOME}/.edgellm/deploy"
STAMP_PATH = f"{REMOTE_DIR}/installed.stamp"
MODEL_PATH = f"{REMOTE_DIR}/model"
CONSTRAINED_PATH = f"{REMOTE_DIR}/constrained"  # install.sh: "available" or "unavailable: <why>"
TOKEN_PATH = f"{HOME}/.edgellm/token"  # the daemon's token, made by install.sh (or its first start)
CERT_PATH = f"{HOME}/.edgellm/tls/cert.pem"  # the daemon's self-signed certificate (its first start)
SERVICE = "edgellm"
DAEMON_LOG = f"{PREFIX}/var/log/sv/{SERVICE}/current"
GATEWAY_RUN = "gateway-run"  # the gateway service's run script, as pushed (deploy/phone_gateway.py)
INSTALL_TIMEOUT_S = 3 * 3600.0  # the first MNN build takes 30-90 minutes on a phone

KEEPALIVE_EXPLANATION = """\
Android kills background processes that Termux starts: Android 12+ has a "phantom process"
killer (max 32 children across apps) and Doze freezes apps that are not whitelisted. To keep the
daemon alive, the deploy will run these adb commands (undo: see docs/deploy.md):
{commands}
Apply them now?"""


@dataclass(frozen=True)
class DeviceFiles:
    """The host files that go into ~/.edgellm/deploy on the phone: remote name -> local path."""

    files: dict[str, Path]

    @classmethod
    def for_wheel(cls, wheel: Path, gateway: bool = False) -> DeviceFiles:
        """The installer, the service scripts, the boot script and the project's wheel; with
        gateway, the gateway service's scripts too (so the stamp, and the install, differ)."""
        files = {
            "install.sh": TERMUX_DIR / "install.sh",
            "run": TERMUX_DIR / "service" / "run",
            "log-run": TERMUX_DIR / "service" / "log" / "run",
            "start-edgellm": TERMUX_DIR / "boot" / "start-edgellm",
            wheel.name: wheel,
        }
        if gateway:
            files[GATEWAY_RUN] = TERMUX_DIR / "gateway" / "run"
            files["gateway-log-run"] = TERMUX_DIR / "gateway" / "log" / "run"
        return cls(files)

    @property
    def gateway(self) -> bool:
        """Whether these files install the gateway beside the daemon."""
        return GATEWAY_RUN in self.files

    def hashes(self) -> dict[str, str]:
        """sha256 of each file, keyed by remote name."""
        return {name: hashlib.sha256(p.read_bytes()).hexdigest() for name, p in self.files.items()}

    def stamp(self) -> str:
        """One value that changes when any file changes: the installer writes it when it succeeds."""
        joined = "".join(f"{n}={h};" for n, h in sorted(self.hashes().items()))
        return hashlib.sha256(joined.encode()).hexdigest()[:32]

    @property
    def wheel_name(self) -> str:
        """The remote name of the wheel."""
        return next(n for n in self.files if n.endswith(".whl"))


@dataclass
class Step:
    """One step: `done()` is a read-only check, `apply()` changes the phone or the host."""

    name: str
    describe: str
    commands: list[str]
    done: Callable[[], bool]
    apply: Callable[[], None]


@dataclass
class StepReport:
    """What happened to one step."""

    name: str
    outcome: str  # "done", "skipped", "would run", "would skip"


@dataclass
class DeployState:
    """What earlier steps learned, for later ones (a fresh install must restart the service)."""

    changed_files: bool = False
    installed: bool = False
    messages: list[str] = field(default_factory=list)


def run_plan(steps: list[Step], dry_run: bool, out: Callable[[str], None]) -> list[StepReport]:
    """Run each step unless it is done; with dry_run, only report what would happen."""
    reports = []
    for i, step in enumerate(steps, 1):
        already = step.done()
        if dry_run:
            outcome = "would skip (already done)" if already else "would run"
            out(f"[{i}/{len(steps)}] {step.name}: {outcome} — {step.describe}")
            if not already:
                for cmd in step.commands:
                    out(f"      $ {cmd}")
        elif already:
            outcome = "skipped"
            out(f"[{i}/{len(steps)}] {step.name}: already done")
        else:
            out(f"[{i}/{len(steps)}] {step.name}: {step.describe}")
            step.apply()
            outcome = "done"
        reports.append(StepReport(step.name, outcome))
    return reports


def remote_hashes(channel: Channel, names: list[str]) -> dict[str, str]:
    """sha256 of the files already in ~/.edgellm/deploy on the phone."""
    paths = " ".join(shlex.quote(f"{REMOTE_DIR}/{n}") for n in names)
    out = channel.run(f"sha256sum {paths} 2>/dev/null; true").stdout
    result = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            result[parts[1].rsplit("/", 1)[-1]] = parts[0]
    return result


def read_remote(channel: Channel, path: str) -> str:
    """A small text file on the phone, or '' when absent."""
    return channel.run(f"cat {shlex.quote(path)} 2>/dev/null; true").stdout.strip()


def constrained_line(channel: Channel) -> str:
    """What the installer recorded about llguidance, as the deploy's summary line."""
    state = read_remote(channel, CONSTRAINED_PATH)
    if state == "available":
        return "constrained output: available"
    why = state.removeprefix("unavailable: ") or f"the installer recorded nothing at {CONSTRAINED_PATH}"
    return (
        f"constrained output: unavailable: {why}; requests with response_format/json schema get "
        "FAILED_PRECONDITION"
    )


def service_running(channel: Channel, service: str = SERVICE) -> bool:
    """True when `sv status SERVICE` says it runs (default: the daemon's service)."""
    return channel.run(f"sv status {service}").stdout.startswith(f"run: {service}")


def keepalive_step(
    phone: Phone, facts: PhoneFacts, confirm: Callable[[str], bool], state: DeployState
) -> Step:
    """Disarm the phantom-process killer (per Android version) and whitelist Termux from Doze."""
    cache: dict[str, KeepAlive] = {}

    def status() -> KeepAlive:
        if "s" not in cache:
            cache["s"] = keepalive_status(phone, facts.sdk)
        return cache["s"]

    def apply() -> None:
        cmds = keepalive_fix_commands(facts.sdk, status())
        text = KEEPALIVE_EXPLANATION.format(commands="\n".join(f"  adb shell {c}" for c in cmds))
        if not confirm(text):
            state.messages.append("keep-alive protections declined: Android may kill the daemon")
            return
        for cmd in cmds:
            r = phone.shell(cmd)
            if not r.ok:
                raise DeployError(f"`adb shell {cmd}` failed: {r.stdout}{r.stderr}")

    return Step(
        "keep-alive",
        f"phantom-process killer off (Android {facts.release}, SDK {facts.sdk}) and Doze whitelist",
        keepalive_fix_commands(facts.sdk, KeepAlive(False, False)),
        lambda: status().ok,
        apply,
    )


def files_step(channel: Channel, files: DeviceFiles, state: DeployState, retries: int = 3) -> Step:
    """Copy the wheel, installer and service files whose hashes differ on the phone."""
    local = files.hashes()

    def stale() -> list[str]:
        remote = remote_hashes(channel, sorted(local))
        return [n for n in sorted(local) if remote.get(n) != local[n]]

    def apply() -> None:
        for name in stale():
            for attempt in range(1, retries + 1):
                try:
                    channel.put(files.files[name], f"{REMOTE_DIR}/{name}")
                    break
                except DeployError as e:
                    # Why retry: a USB hiccup drops the adb connection mid-push; a fresh push of
                    # the whole (small) file is the recovery.
                    log.warning("push_retry", file=name, attempt=attempt, error=str(e))
                    if attempt == retries:
                        raise
        state.changed_files = True

    return Step(
        "files",
        f"copy {len(local)} files to {REMOTE_DIR}",
        [f"push {n} -> {REMOTE_DIR}/{n}" for n in sorted(local)],
        lambda: not stale(),
        apply,
    )


def install_step(channel: Channel, files: DeviceFiles, state: DeployState) -> Step:
    """Run the Termux installer unless it already succeeded for exactly these files."""
    stamp = files.stamp()
    script = (
        f"bash {REMOTE_DIR}/install.sh --wheel {shlex.quote(f'{REMOTE_DIR}/{files.wheel_name}')}"
        f" --stamp {stamp}"
        + (" --gateway" if files.gateway else "")
        + f" 2>&1 | tee {HOME}/.edgellm/logs/install.log; exit ${{PIPESTATUS[0]}}"
    )
    script = f"mkdir -p {HOME}/.edgellm/logs && " + script

    def apply() -> None:
        r = channel.run(script, timeout=INSTALL_TIMEOUT_S)
        if not r.ok:
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
            raise DeployError(
                f"the Termux installer failed (exit {r.returncode}); it is resumable, so re-run "
                f"`edgellm deploy device`. Log: ~/.edgellm/logs/ in Termux. Last lines:\n{tail}"
            )
        state.installed = True

    return Step(
        "install",
        "pkg install python, numpy, grpcio, termux-api, termux-services; pip install the wheel; "
        "build MNN if missing; try llguidance (constrained output); install the runit service "
        "and the boot script",
        [script],
        lambda: read_remote(channel, STAMP_PATH) == stamp,
        apply,
    )


# Why setsid/nohup: runsvdir (started by termux-services' service-daemon) must outlive this adb or
# ssh session; detached from it and its pipes, the session's end does not take the daemon down.
# The wake lock keeps Doze from suspending Termux until the next reboot (the boot script re-takes it).
SERVICE_START = (
    "setsid nohup service-daemon start </dev/null >/dev/null 2>&1; sleep 1; "
    "termux-wake-lock </dev/null >/dev/null 2>&1; "
    f"sv-enable {SERVICE} >/dev/null 2>&1; "
)


def service_step(channel: Channel, state: DeployState) -> Step:
    """Start the runit service, restarting it when this run upgraded anything."""
    return runit_step(
        channel, state, SERVICE, "service", "start (or restart after an upgrade) the runit service `edgellm`"
    )


def runit_step(channel: Channel, state: DeployState, service: str, name: str, description: str) -> Step:
    """Enable and (re)start runit SERVICE; skipped when nothing changed and it already runs."""
    # SERVICE_START enables the daemon's service itself; any other one is enabled here.
    enable = "" if service == SERVICE else f"sv-enable {service} >/dev/null 2>&1; "
    script = SERVICE_START + enable + f"sv restart {service}"
    what = "the service" if service == SERVICE else f"the service {service}"

    def apply() -> None:
        r = channel.run(script)
        if not r.ok:
            raise DeployError(f"could not start {what}: {r.stdout}{r.stderr}")

    return Step(
        name,
        description,
        [script],
        lambda: not state.installed and not state.changed_files and service_running(channel, service),
        apply,
    )


def forward_step(phone: Phone, local_port: int, remote_port: int, name: str = "forward") -> Step:
    """`adb forward tcp:LOCAL tcp:REMOTE`."""
    remote = f"tcp:{remote_port}"
    return Step(
        name,
        f"adb forward tcp:{local_port} {remote}",
        [f"adb -s {phone.serial} forward tcp:{local_port} {remote}"],
        lambda: phone.forwards().get(local_port) == remote,
        lambda: phone.forward(local_port, remote),
    )


def fetch_token(channel: Channel, host_file: Path) -> str:
    """Copy the phone daemon's token over the control channel into HOST_FILE (0600); return it."""
    token = read_remote(channel, TOKEN_PATH)
    if not token:
        raise DeployError(
            f"the daemon has no token at {TOKEN_PATH} yet; it makes one when it starts: see "
            "`edgellm deploy logs`, then re-run `edgellm deploy device`"
        )
    write_secret(host_file, token)  # atomic, 0600; a rotated token on the phone replaces the old one
    log.info("token_saved", path=str(host_file))
    return token


def fetch_cert(channel: Channel, label: str, timeout: float) -> TrustedCert:
    """The phone daemon's certificate, read over the control channel and trusted from now on under
    LABEL (`<config dir>/trusted`). Polls: the daemon makes it on its first start.

    Why over adb/ssh and not from the port: whatever answers on the forwarded port may be a
    squatter (H1); the file in Termux's private home can only come from the daemon.
    """
    from edgellm.common.pins import remember_cert

    deadline = time.monotonic() + timeout
    while not (pem := read_remote(channel, CERT_PATH)):
        if time.monotonic() > deadline:
            raise DeployError(
                f"the daemon has made no certificate at {CERT_PATH} after {timeout:.0f} s (it makes "
                "one on its first start): see `edgellm deploy logs`, then re-run `edgellm deploy device`"
            )
        time.sleep(0.5)
    try:
        cert = remember_cert(pem + "\n", label)
    except ValueError as exc:
        raise DeployError(f"{CERT_PATH} on the phone is not a PEM certificate: {exc}") from exc
    log.info("certificate_trusted", pin=cert.pin, label=label, path=cert.where)
    return cert


def wait_health(target: str, timeout: float, want_serving: bool = False, tls: ClientTls | None = None) -> str:
    """Poll the gRPC health service until it answers (or reports SERVING); return its status name.

    TLS: trust of the daemon's certificate (it serves TLS by default). Never a token: health needs
    none, and a squatter must not get one (H1).
    """
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from edgellm.common.channel import ChannelSecurity, open_channel
    from edgellm.common.errors import EdgeError

    deadline = time.monotonic() + timeout
    last = "UNREACHABLE"
    security = ChannelSecurity(None, tls=tls)
    while True:
        try:
            with open_channel(target, security) as ch:
                resp = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=2.0
                )
            last = str(health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))
            if not want_serving or last == "SERVING":
                return last
        except grpc.RpcError as e:
            log.debug("health_wait", target=target, code=str(e.code()))
            if tls is not None and "handshake" in str(e.details()).lower() and time.monotonic() > deadline:
                raise DeployError(diagnose(target, tls)) from e
        except EdgeError as e:  # nothing listening yet, or a server that is not the pinned daemon
            last = "UNREACHABLE"
            log.debug("health_wait", target=target, error=str(e))
            if time.monotonic() > deadline:
                raise DeployError(f"{e}; see `edgellm deploy logs`") from e
        if time.monotonic() > deadline:
            raise DeployError(
                f"the daemon at {target} is {last} after {timeout:.0f} s; see `edgellm deploy logs` for why"
            )
        time.sleep(0.5)
