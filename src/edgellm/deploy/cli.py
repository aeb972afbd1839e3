"""`edgellm deploy device|status|logs|stop|uninstall`: put the daemon on a phone under Termux."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgellm.common.paths import default_artifact_dir


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `deploy` subcommand and its actions."""
    p = sub.add_parser("deploy", help="install, start and connect the daemon on a phone (Termux)")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, help_text in (
        ("device", "install or upgrade, start, forward, push the artifact (idempotent)"),
        ("status", "service, forward and keep-alive protections"),
        ("logs", "the daemon's log on the phone"),
        ("stop", "stop the daemon and remove the forward"),
        ("rotate-token", "rotate the phone daemon's token (old one refused at once) and fetch the new one"),
        ("uninstall", "remove the service, boot script and edgellm package from Termux"),
    ):
        a = actions.add_parser(name, help=help_text)
        a.add_argument("--serial", default=None, help="adb serial (needed when several phones are attached)")
        a.add_argument("--port", type=int, default=50051, help="host port forwarded to the daemon")
        a.add_argument("--yes", action="store_true", help="accept the keep-alive and ssh prompts")
        a.add_argument(
            "--gateway-port", type=int, default=8080, help="host port forwarded to the phone's gateway"
        )
        if name == "device":
            a.add_argument("--artifact", default=None, help="artifact directory to push, or 'default'")
            a.add_argument("--wheel", type=Path, default=None, help="prebuilt edgellm wheel (else built)")
            a.add_argument(
                "--dry-run", action="store_true", help="print every step without changing anything"
            )
            a.add_argument(
                "--gateway", action="store_true",
                help="also run the OpenAI gateway on the phone (127.0.0.1:8080 there, its own API key; "
                "docs/deploy.md)",
            )  # fmt: skip
        if name == "logs":
            a.add_argument("-n", "--lines", type=int, default=100, help="how many of the last lines to show")
        a.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Dispatch to deploy.device; DeployError becomes a one-line message and exit status 1."""
    from edgellm.deploy.adb import DeployError
    from edgellm.deploy.device import (
        DeployConfig,
        deploy_device,
        deploy_logs,
        deploy_rotate_token,
        deploy_status,
        deploy_stop,
        deploy_uninstall,
    )

    artifact = getattr(ns, "artifact", None)
    config = DeployConfig(
        serial=ns.serial,
        artifact=default_artifact_dir() if artifact == "default" else Path(artifact) if artifact else None,
        local_port=ns.port,
        dry_run=getattr(ns, "dry_run", False),
        assume_yes=ns.yes,
        wheel=getattr(ns, "wheel", None),
        gateway=getattr(ns, "gateway", False),
        gateway_port=ns.gateway_port,
    )
    try:
        if ns.action == "device":
            deploy_device(config)
        elif ns.action == "status":
            deploy_status(config)
        elif ns.action == "logs":
            deploy_logs(config, ns.lines)
        elif ns.action == "stop":
            deploy_stop(config)
        elif ns.action == "rotate-token":
            deploy_rotate_token(config)
        else:
            deploy_uninstall(config)
    except DeployError as e:
        sys.stderr.write(f"edgellm deploy {ns.action}: {e}\n")
        return 1
    return 0
