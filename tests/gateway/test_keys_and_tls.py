"""The gateway's key file (made 0600 on first use, never through a link, rotated and re-read) and
HTTPS, with a certificate the user brings (signed by their own CA) and with the self-signed one."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import stat
from pathlib import Path

import httpx
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from openai.types.chat import ChatCompletionMessageParam

from edgellm.common.errors import FailedPrecondition
from edgellm.common.tls import ServerTls, ensure_self_signed
from edgellm.device.rpc.server import RunningDaemon
from edgellm.gateway.keys import KeyFile, ensure_gateway_key, gateway_key_path, rotate_gateway_key
from tests.gateway.conftest import KEY, StartGateway

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the capital of France?"}]


def test_the_key_is_made_once_0600_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGELLM_CONFIG_DIR", str(tmp_path / "cfg"))
    path = gateway_key_path()
    assert path == tmp_path / "cfg" / "gateway-key"
    key = ensure_gateway_key(path)
    assert len(key) >= 43 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert ensure_gateway_key(path) == key


def test_a_key_file_that_is_a_link_readable_by_others_or_empty_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("planted\n")
    target.chmod(0o600)
    link = tmp_path / "gateway-key"
    link.symlink_to(target)
    with pytest.raises(FailedPrecondition, match="symbolic link"):
        ensure_gateway_key(link)
    assert target.read_text() == "planted\n"  # nothing written through the link
    loose = tmp_path / "loose"
    loose.write_text("k\n")
    loose.chmod(0o644)
    with pytest.raises(FailedPrecondition, match="chmod 600"):
        KeyFile(loose)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(FailedPrecondition, match="empty"):
        KeyFile(empty)


async def test_a_rotated_key_replaces_the_old_one_in_a_running_gateway(
    tmp_path: Path, start_gw: StartGateway, fake_daemon: RunningDaemon
) -> None:
    path = tmp_path / "gateway-key"
    old = ensure_gateway_key(path)
    gw = await start_gw(fake_daemon, api_key_file=path)
    base = f"http://127.0.0.1:{gw.port}"
    async with httpx.AsyncClient(base_url=base) as http:
        assert (await http.get("/v1/models", headers={"Authorization": f"Bearer {old}"})).status_code == 200
        new = rotate_gateway_key(path)
        assert new != old and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert (await http.get("/v1/models", headers={"Authorization": f"Bearer {old}"})).status_code == 401
        assert (await http.get("/v1/models", headers={"Authorization": f"Bearer {new}"})).status_code == 200


def _user_pair(directory: Path) -> tuple[Path, ServerTls]:
    """A CA and a server certificate it signed for 127.0.0.1 (what a user brings); returns (CA, pair)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test user CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gateway.test")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert, key_file = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_file.chmod(0o600)
    return ca_file, ServerTls(cert, key_file)


async def _ask_over_https(url: str, trust: Path) -> str:
    verify = ssl.create_default_context(cafile=str(trust))
    async with (
        httpx.AsyncClient(verify=verify) as http,
        # Why the ignore: this openai release types http_client against its own httpx2 alias.
        openai.AsyncOpenAI(base_url=url, api_key=KEY, http_client=http, max_retries=0) as c,  # type: ignore[arg-type]
    ):
        answer = await c.chat.completions.create(model="fake-model", messages=QUESTION, max_tokens=3)
    return answer.choices[0].message.content or ""


async def test_https_with_a_user_supplied_certificate_off_loopback(
    tmp_path: Path, start_gw: StartGateway, fake_daemon: RunningDaemon
) -> None:
    ca, pair = _user_pair(tmp_path)
    gw = await start_gw(fake_daemon, host="0.0.0.0", tls=pair)  # refused without tls (validate)
    assert gw.url.startswith("https://")
    assert await _ask_over_https(gw.url, ca)
    async with httpx.AsyncClient(verify=False) as plain:
        with pytest.raises(httpx.TransportError):
            await plain.get(f"http://127.0.0.1:{gw.port}/health")  # no cleartext on the TLS port
    (tmp_path / "other").mkdir()
    other_ca, _ = _user_pair(tmp_path / "other")
    with pytest.raises(openai.APIConnectionError):  # a client that trusts another CA refuses it
        await _ask_over_https(gw.url, other_ca)


async def test_https_with_the_self_signed_certificate(
    tmp_path: Path, start_gw: StartGateway, fake_daemon: RunningDaemon
) -> None:
    pair = ensure_self_signed(tmp_path / "gateway-tls")
    assert stat.S_IMODE(pair.key.stat().st_mode) == 0o600
    gw = await start_gw(fake_daemon, tls=pair)
    assert await _ask_over_https(gw.url, pair.cert)
