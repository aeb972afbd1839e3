"""TLS for both services: server certificate/key, client trust by CA file or pinned fingerprint.

Pinning a self-signed certificate with grpcio: grpcio's channel credentials take root
certificates, not a verification callback. So the client fetches the server's certificate once
(`ssl.get_server_certificate`), checks its sha256 against the pin, and then uses exactly that
certificate as the only trust root of the channel. A man in the middle who swaps certificates
between the fetch and the connect gains nothing: the channel's handshake must still be signed by
the private key of the pinned certificate. The certificate's own name is used as the target
name (`grpc.ssl_target_name_override`), because the pin, not DNS, is what the client trusts.
"""

from __future__ import annotations

import hashlib
import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from edgellm.common.errors import FailedPrecondition, InvalidArgument, Unauthenticated

CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
SELF_SIGNED_NAME = "edgellm-daemon"  # the DNS name in every self-signed certificate edgellm makes
PIN_PREFIX = "sha256:"


def fingerprint(cert_pem: str | bytes) -> str:
    """'sha256:<hex>' of a PEM certificate's DER bytes (what `openssl x509 -fingerprint -sha256` hashes)."""
    text = cert_pem.decode() if isinstance(cert_pem, bytes) else cert_pem
    der = ssl.PEM_cert_to_DER_cert(text)
    return PIN_PREFIX + hashlib.sha256(der).hexdigest()


def normalise_pin(pin: str) -> str:
    """Accept 'sha256:ab12…', 'AB:12:…' or bare hex; return 'sha256:<64 lower hex>'."""
    digits = pin.strip().lower().removeprefix(PIN_PREFIX).replace(":", "")
    if len(digits) != 64 or any(c not in "0123456789abcdef" for c in digits):
        raise InvalidArgument(f"a pin is sha256:<64 hex digits>, got {pin!r}")
    return PIN_PREFIX + digits


@dataclass(frozen=True)
class ServerTls:
    """A certificate chain and its private key (PEM files)."""

    cert: Path
    key: Path

    def credentials(self) -> grpc.ServerCredentials:
        """grpc server credentials from the files."""
        for p in (self.cert, self.key):
            if not p.is_file():
                raise FailedPrecondition(f"TLS file {p} not found")
        from edgellm.common.tokens import check_secret_file

        check_secret_file(self.key)  # L11: a private key others can read is no secret
        return grpc.ssl_server_credentials([(self.key.read_bytes(), self.cert.read_bytes())])


@dataclass(frozen=True)
class ClientTls:
    """How a client trusts the server: pinned fingerprints, trusted certificates, or a CA bundle.

    pins: fingerprints (`--tls-pin`); the certificate is fetched once and checked before the
    channel uses it as its only root. roots: PEM certificates the user already trusts
    (edgellm.common.pins), used as the channel's roots directly. ca: a CA bundle file.
    where: for messages, what each accepted certificate is and where it was found.
    """

    ca: Path | None = None
    pins: tuple[str, ...] = ()
    roots: bytes | None = None
    server_name: str | None = None  # override the name checked in the certificate
    where: tuple[str, ...] = ()

    def credentials(self, target: str) -> tuple[grpc.ChannelCredentials, list[tuple[str, str]]]:
        """Channel credentials and options (the target-name override) for TARGET."""
        name = self.server_name or SELF_SIGNED_NAME
        if self.pins:
            pem = fetch_certificate(target, self.describe())
            got = fingerprint(pem)
            if got not in self.pins_accepted():
                raise Unauthenticated(untrusted(target, got, self.describe()))
            return grpc.ssl_channel_credentials(root_certificates=pem.encode()), [
                ("grpc.ssl_target_name_override", name)
            ]
        if self.roots is not None:
            # Every edgellm self-signed certificate names itself SELF_SIGNED_NAME: the roots, not
            # DNS, are what the client trusts.
            return grpc.ssl_channel_credentials(root_certificates=self.roots), [
                ("grpc.ssl_target_name_override", name)
            ]
        roots = self.ca.read_bytes() if self.ca is not None else None
        options = [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
        return grpc.ssl_channel_credentials(root_certificates=roots), options

    def pins_accepted(self) -> set[str]:
        """The fingerprints this trust accepts (pins, and those of the root certificates)."""
        accepted = {normalise_pin(p) for p in self.pins}
        if self.roots is not None:
            for block in self.roots.decode("ascii", "replace").split("-----END CERTIFICATE-----"):
                if "-----BEGIN CERTIFICATE-----" in block:
                    accepted.add(fingerprint(block.strip() + "\n-----END CERTIFICATE-----\n"))
        return accepted

    def describe(self) -> str:
        """'sha256:ab12… (from FILE) or …' for messages (at most three)."""
        if self.where:
            shown = list(self.where)
        elif self.ca is not None:
            return f"a certificate signed by a CA in {self.ca}"
        else:
            shown = sorted(self.pins_accepted())
        more = f" or {len(shown) - 3} more" if len(shown) > 3 else ""
        return " or ".join(shown[:3]) + more


def untrusted(target: str, got: str, wanted: str) -> str:
    """Why a server whose certificate is not the one expected got no token (H1), for the user."""
    return (
        f"the server at {target} presented certificate {got}, but this client expected {wanted}; "
        "the token was not sent. Another program may be listening on this port, or the daemon's "
        "certificate changed (fetch it again with `edgellm deploy device`, or pass --tls-pin)"
    )


def fetch_certificate(target: str, expected: str = "", timeout: float = 5.0) -> str:
    """The PEM certificate a TLS server at host:port presents (not verified: the caller pins it).

    Nothing listening is UNAVAILABLE (the daemon is down: retry later); a server that does not
    complete a TLS handshake is UNAUTHENTICATED: it cannot be the pinned server.
    """
    from edgellm.common.auth import target_host
    from edgellm.common.errors import Unavailable

    host = target_host(target)
    port = int(target.rsplit(":", 1)[1])
    wanted = expected or "a certificate this client trusts"
    try:
        return ssl.get_server_certificate((host, port), timeout=timeout)
    except ConnectionRefusedError as exc:
        raise Unavailable(f"nothing is listening at {target}; is the daemon running?") from exc
    except (ssl.SSLError, ConnectionResetError, TimeoutError) as exc:
        raise Unauthenticated(
            f"the server at {target} does not speak TLS ({type(exc).__name__}), so it is not the "
            f"edgellm server this client trusts ({wanted}); the token was not sent. Another program "
            "may be listening on this port (is the daemon running? on a phone: `edgellm deploy "
            "status`). A daemon started with --insecure-loopback serves plaintext: pass "
            "--insecure-loopback to the client too"
        ) from exc
    except OSError as exc:
        raise Unavailable(f"could not reach {target}: {exc}") from exc


def generate_self_signed(directory: Path, names: tuple[str, ...] = (), days: int = 3650) -> ServerTls:
    """Write a self-signed EC P-256 certificate and key (0600) into DIRECTORY; return their paths.

    Needs `cryptography` (the host extra; on Termux `pkg install python-cryptography`).
    """
    import datetime
    import ipaddress

    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError as exc:
        raise FailedPrecondition(
            "generating a certificate needs the `cryptography` package: `pip install cryptography` "
            "(Termux: `pkg install python-cryptography`), or make one on the host with "
            "`edgellm tls init` and copy it"
        ) from exc
    from edgellm.common.tokens import write_secret

    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(SELF_SIGNED_NAME), x509.DNSName("localhost")]
    sans += [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("::1"))]
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    # Why a unique subject: a client trusts several of these certificates at once (its own daemon,
    # a phone, its host service; edgellm.common.pins), and BoringSSL picks a root by subject name:
    # two roots with one subject made the handshake fail with "self signed certificate".
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, SELF_SIGNED_NAME),
            x509.NameAttribute(NameOID.SERIAL_NUMBER, secrets.token_hex(8)),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    tls = ServerTls(directory / CERT_FILE, directory / KEY_FILE)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_secret(tls.key, key_pem.decode())
    write_secret(tls.cert, cert.public_bytes(serialization.Encoding.PEM).decode())
    return tls


def ensure_self_signed(directory: Path, names: tuple[str, ...] = ()) -> ServerTls:
    """The self-signed pair in DIRECTORY, generated on first use."""
    tls = ServerTls(directory / CERT_FILE, directory / KEY_FILE)
    if tls.cert.is_file() and tls.key.is_file():
        return tls
    return generate_self_signed(directory, names)
