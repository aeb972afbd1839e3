"""The `deploy` subcommands as plain functions: device, status, logs, stop, uninstall."""

from __future__ import annotations

import shlex
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgellm.common.channel import ChannelSecurity
from edgellm.common.logs import get_logger
from edgellm.common.paths import source_root
from edgellm.common.pins import trust_of, trusted_dir
from edgellm.common.tokens import target_token_path
from edgellm.deploy.adb import AdbServer, DeployError, Phone, connect
from edgellm.deploy.channel import (
    HOME,
    PREFIX,
    Channel,
    RunAsChannel,
    Runner,
    SshKeys,
    open_ssh_channel,
    run_as_works,
    run_host,
)
from edgellm.deploy.flow import (
    CERT_PATH,
    DAEMON_LOG,
    MODEL_PATH,
    REMOTE_DIR,
    SERVICE,
    SERVICE_START,
    TOKEN_PATH,
    DeployState,
    DeviceFiles,
    StepReport,
    constrained_line,
    fetch_cert,
    fetch_token,
    files_step,
    forward_step,
    install_step,
    keepalive_step,
    read_remote,
    run_plan,
    service_running,
    service_step,
    wait_health,
)
from edgellm.deploy.phone_gateway import (
    GATEWAY_KEY_PATH,
    GATEWAY_PORT,
    GATEWAY_SERVICE,
    gateway_running,
    gateway_service_step,
    gateway_status,
    key_lines,
    read_key_command,
    wait_gateway,
)
from edgellm.deploy.probe import PhoneFacts, check_termux, keepalive_status, probe

log = get_logger(__name__)

DAEMON_PORT = 50051
WHEEL_EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry can hold

# Pushes an artifact directory to the daemon at target (with the daemon's token, to the pinned
# certificate only) and loads it; returns the model id to load at the next start. The default is
# the resumable push client.
ArtifactInstaller = Callable[[str, Path, ChannelSecurity], str]


def push_artifact(target: str, artifact: Path, security: ChannelSecurity) -> str:
    """Resumable push (edgellm.common.pusher.Pusher) through the forwarded port; returns the artifact id."""
    # Imported lazily: the push client is its own module, only needed when there is an artifact.
    from edgellm.common.channel import open_channel
    from edgellm.common.pusher import Pusher

    with open_channel(target, security) as ch:
        report = Pusher(ch, artifact).run()
    log.info("artifact_pushed", id=report.artifact_id, sent=report.bytes_sent, skipped=report.bytes_skipped)
    return report.artifact_id


def load_model(target: str, model: str, security: ChannelSecurity) -> None:
    """LoadModel on the daemon (replaces any loaded model)."""
    from edgellm.common.channel import open_channel
    from edgellm.v1 import device_pb2, device_pb2_grpc

    with open_channel(target, security) as ch:
        device_pb2_grpc.DeviceDaemonStub(ch).LoadModel(device_pb2.LoadModelRequest(model=model), timeout=600)


def default_artifact_installer(target: str, artifact: Path, security: ChannelSecurity) -> str:
    """Push the artifact (resuming), then load it; returns the id the service loads at start."""
    artifact_id = push_artifact(target, artifact, security)
    load_model(target, artifact_id, security)
    return artifact_id


@dataclass(frozen=True)
class DeployConfig:
    """Everything `edgellm deploy` is told."""

    serial: str | None = None
    artifact: Path | None = None
    local_port: int = DAEMON_PORT
    ssh_local_port: int = 58022
    dry_run: bool = False
    assume_yes: bool = False
    adb: AdbServer = field(default_factory=AdbServer)
    wheel: Path | None = None  # prebuilt wheel; built from the repository when None
    health_timeout_s: float = 60.0
    ssh_keys: SshKeys = field(
        default_factory=lambda: SshKeys(Path.home() / ".config" / "edgellm" / "ssh" / "id_ed25519")
    )
    # Where the phone's token is kept (0600); None: its own file for the forwarded address, so the
    # host service and a local daemon never share the phone's token (L14).
    token_file: Path | None = None
    gateway: bool = False  # also the OpenAI gateway on the phone, as a service beside the daemon
    gateway_port: int = GATEWAY_PORT  # host port forwarded to the phone's gateway

    def token_path(self) -> Path:
        """The file the phone's token goes to."""
        return self.token_file or target_token_path(f"127.0.0.1:{self.local_port}")


@dataclass
class DeployIO:
    """How the deploy talks to the user and the host (injected in tests)."""

    out: Callable[[str], None] = field(default=lambda text: _say(text))
    confirm: Callable[[str], bool] = field(default=lambda text: _ask(text))
    runner: Runner = run_host
    installer: ArtifactInstaller = default_artifact_installer


def _say(text: str) -> None:
    """User-facing output of the deploy commands (logs go to stderr through structlog)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _ask(text: str) -> bool:
    """Ask on the terminal; refuse when stdin is not interactive."""
    if not sys.stdin.isatty():
        _say(f"{text}\n(not a terminal: pass --yes to accept)")
        return False
    return input(f"{text} [y/N] ").strip().lower() in ("y", "yes")


def build_wheel(out_dir: Path, runner: Runner = run_host) -> Path:
    """`pip wheel --no-deps .` of this repository into out_dir."""
    # Why SOURCE_DATE_EPOCH: a reproducible wheel (fixed zip timestamps) hashes the same when the
    # code has not changed, so a re-run skips the copy, the install and the restart.
    root = source_root()
    if root is None:
        raise DeployError("edgellm runs from an installed package, not a checkout: pass --wheel FILE")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out_dir), str(root)]
    p = runner(["env", f"SOURCE_DATE_EPOCH={WHEEL_EPOCH}", *pip])
    wheels = sorted(out_dir.glob("edgellm-*.whl"))
    if p.returncode != 0 or not wheels:
        raise DeployError(f"could not build the edgellm wheel: {p.stderr.strip()}")
    return wheels[-1]


def open_channel(phone: Phone, facts: PhoneFacts, config: DeployConfig, io: DeployIO) -> Channel:
    """run-as on a debuggable Termux, else sshd over adb forward."""
    if facts.debuggable and run_as_works(phone):
        return RunAsChannel(phone)
    io.out("Termux is not debuggable: using Termux's sshd on port 8022 over adb forward")
    if config.dry_run:
        raise DeployError("dry run: the ssh channel needs one-time setup in Termux; run without --dry-run")
    confirm = (lambda _t: True) if config.assume_yes else io.confirm
    if config.assume_yes:
        io.out("one-time ssh setup: see docs/deploy.md, 'Non-debuggable Termux'")
    return open_ssh_channel(phone, config.ssh_keys, config.ssh_local_port, confirm, io.runner)


def deploy_device(config: DeployConfig, io: DeployIO | None = None) -> list[StepReport]:
    """Find the phone, install and start the daemon, forward its port, push the artifact."""
    io = io or DeployIO()
    phone = connect(config.serial, config.adb, start_server=not config.dry_run)
    facts = probe(phone)
    for warning in check_termux(facts):
        io.out(f"warning: {warning}")
    io.out(
        f"phone {facts.serial}: {facts.model}, Android {facts.release} (SDK {facts.sdk}), "
        f"Termux {facts.termux_version} ({facts.installers['com.termux']})"
    )
    channel = open_channel(phone, facts, config, io)
    io.out(f"control channel: {channel.name}")
    confirm = (lambda _t: True) if config.assume_yes else io.confirm
    state = DeployState()
    with tempfile.TemporaryDirectory(prefix="edgellm-wheel-") as tmp:
        wheel = config.wheel or build_wheel(Path(tmp), io.runner)
        files = DeviceFiles.for_wheel(wheel, config.gateway)
        steps = [
            keepalive_step(phone, facts, confirm, state),
            files_step(channel, files, state),
            install_step(channel, files, state),
            service_step(channel, state),
            forward_step(phone, config.local_port, DAEMON_PORT),
        ]
        if config.gateway:
            steps += [
                gateway_service_step(channel, state),
                forward_step(phone, config.gateway_port, GATEWAY_PORT, "gateway forward"),
            ]
        reports = run_plan(steps, config.dry_run, io.out)
    target = f"127.0.0.1:{config.local_port}"
    if config.dry_run:
        _dry_run_rest(config, target, io)
        return reports
    cert = fetch_cert(channel, f"phone-{facts.serial}", config.health_timeout_s)
    io.out(f"daemon certificate: {cert.pin} (trusted: {cert.where})")
    # Only this phone's certificate: whatever else this user trusts is not the phone.
    tls = trust_of([cert])
    status = wait_health(target, config.health_timeout_s, tls=tls)
    io.out(f"daemon reachable at {target}: {status}")
    token = fetch_token(channel, config.token_path())
    io.out(f"daemon token: copied from the phone into {config.token_path()} (0600)")
    if config.artifact is not None:
        security = ChannelSecurity(token, "deploy", tls)
        model = io.installer(target, config.artifact, security)
        if read_remote(channel, MODEL_PATH) != model:
            channel.run(f"printf '%s\\n' {shlex.quote(model)} > {MODEL_PATH}")
        status = wait_health(target, config.health_timeout_s, want_serving=True, tls=tls)
        io.out(f"model {model} loaded: {status}")
    if config.gateway:
        _report_gateway(config, channel.name, facts.serial, io)
    io.out(constrained_line(channel))
    for message in state.messages:
        io.out(f"warning: {message}")
    io.out(
        f"\nReady. Talk to it with:\n  edgellm generate --target {target} 'Hello'\n"
        f"  edgellm status --target {target}\nLogs: edgellm deploy logs; stop: edgellm deploy stop"
    )
    return reports


def _dry_run_rest(config: DeployConfig, target: str, io: DeployIO) -> None:
    """What a dry run would do after the plan: push, trust, health, token, gateway."""
    if config.artifact is not None:
        io.out(f"[-] artifact: would push {config.artifact} with the resumable push and load it")
    io.out(f"[-] certificate: would read {CERT_PATH} from the phone and trust it ({trusted_dir()})")
    io.out(f"[-] health: would wait for {target}")
    io.out(f"[-] token: would copy {TOKEN_PATH} from the phone to {config.token_path()} (0600)")
    if config.gateway:
        io.out(f"[-] gateway: would wait for http://127.0.0.1:{config.gateway_port}/health")
        io.out(f"[-] gateway key: stays on the phone in {GATEWAY_KEY_PATH} (0600)")


def _report_gateway(config: DeployConfig, channel_name: str, serial: str, io: DeployIO) -> None:
    """Wait for the phone's gateway through its forward (a model loaded when one was pushed) and
    say where its key is."""
    base = f"http://127.0.0.1:{config.gateway_port}"
    state = wait_gateway(base, config.health_timeout_s, want_model=config.artifact is not None)
    io.out(f"gateway reachable at {base}: {state}")
    read = read_key_command(channel_name, serial, config.ssh_local_port, config.ssh_keys.private)
    for line in key_lines(read, config.gateway_port):
        io.out(line)


def _connected(config: DeployConfig, io: DeployIO) -> tuple[Phone, PhoneFacts, Channel]:
    phone = connect(config.serial, config.adb)
    facts = probe(phone)
    check_termux(facts)
    return phone, facts, open_channel(phone, facts, config, io)


def deploy_status(config: DeployConfig, io: DeployIO | None = None) -> dict[str, str]:
    """Report the service, the forward and whether the keep-alive protections are in place."""
    io = io or DeployIO()
    phone, facts, channel = _connected(config, io)
    keep = keepalive_status(phone, facts.sdk)
    phantom = {None: "not needed", True: "off", False: "ON (daemon may be killed)"}[keep.phantom_killer_off]
    forward = phone.forwards().get(config.local_port, "none")
    report = {
        "phone": f"{facts.model} Android {facts.release} (SDK {facts.sdk})",
        "channel": channel.name,
        "service": channel.run(f"sv status {SERVICE}").stdout.strip() or "not installed",
        "forward": f"tcp:{config.local_port} -> {forward}",
        "phantom-process killer": phantom,
        "doze whitelist": "yes" if keep.doze_whitelisted else "NO (daemon may be frozen)",
        "gateway": gateway_status(channel),
        "boot script": "yes" if read_remote(channel, f"{HOME}/.termux/boot/start-edgellm") else "no",
        "model": read_remote(channel, MODEL_PATH) or "none",
    }
    for key, value in report.items():
        io.out(f"{key:>24}: {value}")
    return report


def deploy_logs(config: DeployConfig, lines: int = 100, io: DeployIO | None = None) -> str:
    """The last lines of the daemon's svlogd log."""
    io = io or DeployIO()
    _, _, channel = _connected(config, io)
    text = channel.run(f"tail -n {int(lines)} {DAEMON_LOG} 2>/dev/null; true").stdout
    io.out(text or f"(no log yet at {DAEMON_LOG})")
    return text


def deploy_rotate_token(config: DeployConfig, io: DeployIO | None = None) -> None:
    """Rotate the phone daemon's token in Termux (it refuses the old one at once) and fetch the new one."""
    io = io or DeployIO()
    _, _, channel = _connected(config, io)
    r = channel.run("edgellm token rotate --daemon")
    if not r.ok:
        raise DeployError(f"could not rotate the token on the phone: {r.stdout}{r.stderr}")
    fetch_token(channel, config.token_path())
    io.out(f"rotated the phone daemon's token; the new one is in {config.token_path()} (0600)")
    if gateway_running(channel):
        # Why restart: the gateway reads the daemon's token once, at start (ChannelSecurity.find);
        # the daemon refuses the old one at once, so the running gateway would get UNAUTHENTICATED.
        r = channel.run(f"sv restart {GATEWAY_SERVICE}")
        if not r.ok:
            raise DeployError(f"could not restart the gateway with the new token: {r.stdout}{r.stderr}")
        io.out("restarted the phone's gateway, which reads the daemon's token at start")


def deploy_stop(config: DeployConfig, io: DeployIO | None = None) -> None:
    """Stop the service (it stays installed and starts again at boot) and remove the forward."""
    io = io or DeployIO()
    phone, _, channel = _connected(config, io)
    if gateway_running(channel):
        channel.run(f"sv down {GATEWAY_SERVICE}")
    if service_running(channel):
        channel.run(f"sv down {SERVICE}")
    phone.remove_forward(config.local_port)
    _remove_gateway_forward(phone, config.gateway_port)
    io.out("stopped; `edgellm deploy device` starts it again")


def deploy_uninstall(config: DeployConfig, io: DeployIO | None = None) -> None:
    """Remove the service, the boot script, the deploy files and the edgellm package (keeps models)."""
    io = io or DeployIO()
    phone, _, channel = _connected(config, io)
    channel.run(
        SERVICE_START + f"sv down {SERVICE} {GATEWAY_SERVICE} 2>/dev/null; "
        f"sv-disable {SERVICE} 2>/dev/null; sv-disable {GATEWAY_SERVICE} 2>/dev/null; "
        f"rm -rf {PREFIX}/var/service/{SERVICE} {PREFIX}/var/service/{GATEWAY_SERVICE} "
        f"{HOME}/.termux/boot/start-edgellm {REMOTE_DIR}; "
        "pip uninstall -y edgellm >/dev/null 2>&1; true"
    )
    phone.remove_forward(config.local_port)
    _remove_gateway_forward(phone, config.gateway_port)
    io.out("uninstalled (models and keys in ~/.edgellm and ~/.config/edgellm, and Termux packages, are kept)")


def _remove_gateway_forward(phone: Phone, local_port: int) -> None:
    """Remove LOCAL_PORT's forward when it leads to the phone's gateway (never another rule)."""
    if phone.forwards().get(local_port) == f"tcp:{GATEWAY_PORT}":
        phone.remove_forward(local_port)
