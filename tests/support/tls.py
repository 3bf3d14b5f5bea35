"""A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1 and localhost, and
a client certificate (for mTLS), written as PEM files into a test's directory. EC P-256 keys:
generated in milliseconds, accepted by gRPC, uvicorn and Python's ssl alike."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kernel.tls import TlsFiles


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def server_env(self, *, mtls: bool = False) -> dict[str, str]:
        """The settings a process serves TLS (with ``mtls``: requiring client certs) with."""
        env = {
            "TRUERUN_TLS_CERT_FILE": str(self.server_cert),
            "TRUERUN_TLS_KEY_FILE": str(self.server_key),
        }
        if mtls:
            env["TRUERUN_TLS_CLIENT_CA_FILE"] = str(self.ca)
        return env

    def client_env(self, *, with_cert: bool = True) -> dict[str, str]:
        """The settings a client verifies the server (and presents its certificate) with."""
        env = {"TRUERUN_TLS_CA_FILE": str(self.ca)}
        if with_cert:
            env["TRUERUN_TLS_CLIENT_CERT_FILE"] = str(self.client_cert)
            env["TRUERUN_TLS_CLIENT_KEY_FILE"] = str(self.client_key)
        return env

    def client_files(self, *, with_cert: bool = True) -> TlsFiles:
        if not with_cert:
            return TlsFiles(str(self.ca))
        return TlsFiles(str(self.ca), str(self.client_cert), str(self.client_key))

    def ssl_context(self) -> ssl.SSLContext:
        """A client context trusting only this CA (for httpx and urllib)."""
        return ssl.create_default_context(cafile=str(self.ca))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _issue(
    subject: str,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
    names: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path, prefix: str = "") -> Pki:
    """A CA and the certificates it signs, as PEM files in ``directory`` (``prefix`` keeps
    two PKIs apart in one directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{prefix}truerun test CA")
    ca_cert = _issue(f"{prefix}truerun test CA", ca_name, ca_key, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _issue(
        "truerun server",
        ca_name,
        ca_key,
        server_key,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        names=[
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _issue(
        "truerun runtime", ca_name, ca_key, client_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH
    )
    pki = Pki(
        ca=directory / f"{prefix}ca.pem",
        server_cert=directory / f"{prefix}server.pem",
        server_key=directory / f"{prefix}server-key.pem",
        client_cert=directory / f"{prefix}client.pem",
        client_key=directory / f"{prefix}client-key.pem",
    )
    pem = serialization.Encoding.PEM
    pki.ca.write_bytes(ca_cert.public_bytes(pem))
    pki.server_cert.write_bytes(server_cert.public_bytes(pem))
    _write_key(pki.server_key, server_key)
    pki.client_cert.write_bytes(client_cert.public_bytes(pem))
    _write_key(pki.client_key, client_key)
    return pki
