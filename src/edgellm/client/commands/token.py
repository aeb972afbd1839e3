"""`edgellm token rotate|pin|pins`: rotate the secrets on this machine, manage trusted certificates."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgellm.common.errors import InvalidArgument
from edgellm.common.pins import known_certs, remember_cert, trusted_dir
from edgellm.common.rotation import rotate, secret_files


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `token` subcommand."""
    p = sub.add_parser(
        "token",
        help="rotate the daemon's token, the host service's token and the gateway's key; "
        "trust a server certificate",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    r = verbs.add_parser(
        "rotate",
        help="write new secrets; running servers refuse the old ones at once (no restart). "
        "A phone's daemon: `edgellm deploy rotate-token` from the host",
    )
    for name, path in secret_files().items():
        r.add_argument(
            f"--{name}", action="store_true", help=f"rotate {path} (default: every file that exists)"
        )
    r.add_argument("--data-dir", type=Path, default=None, help="the daemon's data dir (default ~/.edgellm)")
    r.set_defaults(handler=run_rotate)
    trust = verbs.add_parser(
        "trust", help=f"trust a server's certificate from now on (copied into {trusted_dir()})"
    )
    trust.add_argument(
        "cert", type=Path, help="the server's PEM certificate (a daemon's <data dir>/tls/cert.pem)"
    )
    trust.add_argument("--label", required=True, help="a name for it, e.g. the phone or host it belongs to")
    trust.set_defaults(handler=run_trust)
    ls = verbs.add_parser("pins", help="list the certificates clients trust without flags")
    ls.set_defaults(handler=run_pins)


def run_rotate(ns: argparse.Namespace) -> int:
    """Rotate and say where each new secret is (never the value)."""
    which = tuple(name for name in secret_files() if getattr(ns, name, False))
    for done in rotate(which, ns.data_dir):
        sys.stdout.write(f"rotated the {done.what} secret: {done.path} (0600)\n")
    sys.stdout.write("running servers refuse the old value now; clients on this machine read the new one\n")
    return 0


def run_trust(ns: argparse.Namespace) -> int:
    """Add one trusted certificate."""
    try:
        cert = remember_cert(ns.cert.read_text(encoding="ascii"), ns.label)
    except ValueError as exc:
        raise InvalidArgument(f"{ns.cert} is not a PEM certificate: {exc}") from exc
    sys.stdout.write(f"trusting {cert.pin} ({ns.label}): {cert.where}\n")
    return 0


def run_pins(ns: argparse.Namespace) -> int:
    """Print each trusted certificate and where it comes from."""
    known = known_certs()
    for cert in known:
        sys.stdout.write(f"{cert.pin}  {cert.where}\n")
    if not known:
        sys.stdout.write("no trusted certificates yet: start a daemon here or run `edgellm deploy device`\n")
    return 0
