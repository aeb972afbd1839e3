"""Which server certificates a client trusts without flags (H1: the token goes only to them).

A client sends its bearer token only over TLS to a server that proves it holds the private key of
a certificate the user already trusts. Like ssh's known_hosts, that is every certificate of this
user's own edgellm servers:
- `<config dir>/trusted/<label>.pem`: written by `edgellm deploy device` (the phone daemon's
  certificate, read over adb/ssh with its token, never from the port) or `edgellm token trust`;
- the certificate of a daemon this user runs on this machine (`<data dir>/tls/cert.pem`);
- the certificate of the host service this user runs (`<config dir>/host-tls/cert.pem`).
They become the channel's trust roots, so no extra round trip is needed and a reconnect (after a
daemon restart) is checked again. A process squatting on the daemon's port holds none of these
keys: its handshake fails and it never sees the token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.errors import Unauthenticated, Unavailable
from edgellm.common.tls import CERT_FILE, ClientTls, fetch_certificate, fingerprint, untrusted
from edgellm.common.tokens import config_dir, default_data_dir, write_secret

TRUSTED_DIR = "trusted"
HOST_TLS_DIR = "host-tls"
DAEMON_TLS_DIR = "tls"


@dataclass(frozen=True)
class TrustedCert:
    """One certificate a client trusts: its PEM text, fingerprint and where it was found."""

    pem: str
    pin: str
    where: str


def trusted_dir() -> Path:
    """`<config dir>/trusted`: certificates trusted by `edgellm deploy device` or `edgellm token trust`."""
    return config_dir() / TRUSTED_DIR


def daemon_tls_dir(data_dir: Path | None = None) -> Path:
    """Where a daemon keeps its self-signed pair: `<data dir>/tls`."""
    return (data_dir or default_data_dir()) / DAEMON_TLS_DIR


def host_tls_dir() -> Path:
    """Where the host service keeps its self-signed pair: `<config dir>/host-tls`."""
    return config_dir() / HOST_TLS_DIR


def _read_cert(path: Path) -> TrustedCert | None:
    """The certificate in PATH, or None when it is absent or not one PEM certificate."""
    try:
        pem = path.read_text(encoding="ascii")
        return TrustedCert(pem, fingerprint(pem), str(path))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def label_file(label: str) -> Path:
    """The file a label's certificate is kept in (the label made safe as a file name)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label.strip()).strip("._") or "unnamed"
    return trusted_dir() / f"{safe[:100]}.pem"


def remember_cert(pem: str, label: str) -> TrustedCert:
    """Trust the certificate PEM under LABEL from now on (replacing that label's older one)."""
    pin = fingerprint(pem)  # ValueError: not a PEM certificate
    path = label_file(label)
    write_secret(path, pem)
    return TrustedCert(pem, pin, str(path))


def known_certs() -> list[TrustedCert]:
    """Every certificate a client trusts without flags (see the module doc), each once."""
    paths = sorted(trusted_dir().glob("*.pem")) if trusted_dir().is_dir() else []
    paths += [daemon_tls_dir() / CERT_FILE, host_tls_dir() / CERT_FILE]
    found: dict[str, TrustedCert] = {}
    for path in paths:
        cert = _read_cert(path)
        if cert is not None:
            found.setdefault(cert.pin, cert)
    return list(found.values())


def trust_of(certs: list[TrustedCert]) -> ClientTls | None:
    """Client TLS that accepts exactly CERTS (None for none)."""
    if not certs:
        return None
    roots = "".join(c.pem if c.pem.endswith("\n") else c.pem + "\n" for c in certs)
    return ClientTls(roots=roots.encode(), pins=(), where=tuple(f"{c.pin} ({c.where})" for c in certs))


def diagnose(target: str, expected: ClientTls | None) -> str:
    """Why a TLS connection to TARGET failed, for the user: what answered and what was expected.

    Only for messages after a failure: it fetches the certificate without trusting it and never
    sends a token.
    """
    wanted = expected.describe() if expected is not None else "a certificate this client trusts"
    try:
        pem = fetch_certificate(target, wanted, timeout=3.0)
    except (Unauthenticated, Unavailable) as exc:  # no TLS there, or nothing reachable
        return str(exc)
    except ValueError as exc:  # a target without a port
        return f"could not reach {target}: {exc}"
    got = fingerprint(pem)
    if expected is not None and got in expected.pins_accepted():
        return f"the server at {target} presented a trusted certificate ({got}) but the connection failed"
    return untrusted(target, got, wanted)
