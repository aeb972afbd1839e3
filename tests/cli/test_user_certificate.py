"""TLS with the user's own certificate: a CA and a leaf made here with `cryptography`, handed to a real
`edgellm daemon` and a real `edgellm host` process through --tls-cert/--tls-key; the CLI trusts them
through --tls-ca. A client trusting another CA gets no answer, and says why.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.client.aio import connect
from edgellm.common.channel import ChannelSecurity
from edgellm.common.tls import ClientTls
from edgellm.common.tokens import CONFIG_DIR_ENV, HOME_ENV, TOKEN_ENV
from edgellm.gateway.config import GatewayConfig
from edgellm.gateway.server import start_gateway
from tests.cli.conftest import Result, free_port
from tests.polling import poll


@dataclass(frozen=True)
class Pki:
    """A CA, a leaf it signed for localhost/127.0.0.1 (cert + key), and an unrelated CA."""

    ca: Path
    cert: Path
    key: Path
    other_ca: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(directory: Path, cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{cn}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key, path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca, ca_key, ca_path = _ca(d, "user-ca")
    _, _, other = _ca(d, "other-ca")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name("edgellm-test"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert, key_path = d / "leaf.pem", d / "leaf.key"
    cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    return Pki(ca_path, cert, key_path, other)


def serving_over_tls(target: str, ca: Path, proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
    """A poll condition: health answers over TLS trusting CA (fails at once if the process died)."""

    def check() -> bool:
        assert proc.poll() is None, f"the server exited with {proc.returncode}"
        creds = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
        with grpc.secure_channel(target, creds) as ch:
            try:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
            except grpc.RpcError:
                return False
        return True

    return check


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., tuple[str, subprocess.Popen[bytes]]]]:
    """Start `edgellm ARGS --port P` in its own process (own config dir); stopped at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    env = {k: v for k, v in os.environ.items() if k not in (HOME_ENV, TOKEN_ENV)}
    env[CONFIG_DIR_ENV] = str(tmp_path / "config")

    def start(*argv: str) -> tuple[str, subprocess.Popen[bytes]]:
        port = free_port()
        log = (tmp_path / f"server-{len(procs)}.log").open("wb")
        cmd = [sys.executable, "-m", "edgellm.cli", *argv, "--port", str(port)]
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        return f"127.0.0.1:{port}", procs[-1]

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def test_the_daemon_serves_the_users_certificate_and_the_cli_trusts_it_through_its_ca(
    pki: Pki,
    spawn: Callable[..., tuple[str, subprocess.Popen[bytes]]],
    edgellm: Callable[..., Result],
    tmp_path: Path,
) -> None:
    data = tmp_path / "daemon"
    target, proc = spawn(
        "daemon", "--data-dir", str(data), "--tls-cert", str(pki.cert), "--tls-key", str(pki.key)
    )
    poll(serving_over_tls(target, pki.ca, proc), "the daemon serving TLS")
    trust = ("--target", target, "--token-file", str(data / "token"))
    r = edgellm("status", *trust, "--tls-ca", str(pki.ca))
    assert r.code == 0, r.err
    refused = edgellm("status", *trust, "--tls-ca", str(pki.other_ca))
    assert refused.code != 0 and "Traceback" not in refused.err
    assert f"expected a certificate signed by a CA in {pki.other_ca}" in refused.err, refused.err


def test_the_host_service_serves_the_users_certificate_and_jobs_trust_it_through_its_ca(
    pki: Pki,
    spawn: Callable[..., tuple[str, subprocess.Popen[bytes]]],
    edgellm: Callable[..., Result],
    tmp_path: Path,
) -> None:
    target, proc = spawn(
        "host",
        "--artifacts-dir",
        str(tmp_path / "artifacts"),
        "--tls-cert",
        str(pki.cert),
        "--tls-key",
        str(pki.key),
    )
    poll(serving_over_tls(target, pki.ca, proc), "the host service serving TLS")
    trust = ("--target", target, "--token-file", str(tmp_path / "config" / "token"))
    r = edgellm("jobs", "artifacts", *trust, "--tls-ca", str(pki.ca))
    assert r.code == 0, r.err
    refused = edgellm("jobs", "artifacts", *trust, "--tls-ca", str(pki.other_ca))
    assert refused.code != 0 and "Traceback" not in refused.err
    assert f"expected a certificate signed by a CA in {pki.other_ca}" in refused.err, refused.err


async def test_the_gateway_reaches_a_daemon_with_the_users_certificate_through_its_ca(
    pki: Pki, spawn: Callable[..., tuple[str, subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    """The gateway's own connection to the daemon: token over TLS, trusting the user's CA only."""
    data = tmp_path / "daemon"
    target, proc = spawn(
        "daemon", "--data-dir", str(data), "--tls-cert", str(pki.cert), "--tls-key", str(pki.key)
    )
    await asyncio.to_thread(poll, serving_over_tls(target, pki.ca, proc), "the daemon serving TLS")
    token = (data / "token").read_text().strip()
    for ca, ok in ((pki.ca, True), (pki.other_ca, False)):
        security = ChannelSecurity(token, tls=ClientTls(ca=ca))
        gw = await start_gateway(GatewayConfig(port=0, target=target, api_key="k"), connect(target, security))
        try:
            async with httpx.AsyncClient(headers={"Authorization": "Bearer k"}, timeout=30) as http:
                models = await http.get(f"{gw.url}/models")
        finally:
            await gw.stop()
        # The daemon has no model: an empty list when the gateway got through, a 503 when not.
        assert models.status_code == (200 if ok else 503), models.text
