"""Client-side TLS from PEM files: the one place a truerun client builds its channel
credentials (the agent here; the CLI, the coordinator's capacity client and the gateway
through kernel/tls.py). It lives in the runtime SDK because a device installs the agent
without the server, and the server's clients must not build TLS a second way.

A client uses TLS when its target starts with ``https://`` (stripped before dialing; the
system's trust store verifies the server unless a CA file is given), or when any of the
files is given: ``ca_file`` verifies the server, ``cert_file`` and ``key_file`` are the
client certificate a server asking for mTLS checks. Otherwise the channel is plaintext.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

HTTPS = "https://"


class TlsFileError(ValueError):
    """A TLS file that cannot be used; the message is one line naming its setting."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The PEM files a client uses; "" = not given. ``names`` are the settings they come
    from, so an error names what to fix."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    names: tuple[str, str, str] = (
        "TRUERUN_TLS_CA_FILE",
        "TRUERUN_TLS_CLIENT_CERT_FILE",
        "TRUERUN_TLS_CLIENT_KEY_FILE",
    )

    @property
    def given(self) -> bool:
        return bool(self.ca_file or self.cert_file or self.key_file)


def channel_target(
    target: str, files: TlsFiles | None = None
) -> tuple[str, grpc.ChannelCredentials | None]:
    """(the address to dial, TLS credentials or None for plaintext). Every file is read and
    checked here, so a bad one is a TlsFileError before anything is dialed."""
    files = files or TlsFiles()
    forced = target.startswith(HTTPS)
    address = target.removeprefix(HTTPS)
    if not (forced or files.given):
        return address, None
    ca_name, cert_name, key_name = files.names
    root = read_pem(files.ca_file, ca_name, ca=True) if files.ca_file else None
    cert, key = read_pair(files.cert_file, files.key_file, cert_name, key_name)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=root, private_key=key, certificate_chain=cert
    )
    return address, credentials


def read_pair(
    cert_file: str, key_file: str, cert_name: str, key_name: str
) -> tuple[bytes | None, bytes | None]:
    """A certificate and its private key (PEM), both or neither; checked to belong together
    (ssl loads them as a pair) so a mismatch is told here, not as a failed handshake."""
    if bool(cert_file) != bool(key_file):
        given, missing = (cert_name, key_name) if cert_file else (key_name, cert_name)
        raise TlsFileError(f"{given} is set but {missing} is not: set both or neither")
    if not cert_file:
        return None, None
    cert = read_pem(cert_file, cert_name)
    key = read_pem(key_file, key_name)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert_file, key_file)
    except ssl.SSLError as error:
        raise TlsFileError(
            f"{cert_name}={cert_file} and {key_name}={key_file} are not a PEM certificate "
            f"and its private key ({error.reason or error})"
        ) from None
    return cert, key


def read_pem(path: str, name: str, *, ca: bool = False) -> bytes:
    """The file's bytes; a TlsFileError when it cannot be read or holds no PEM block (a CA
    bundle must load as certificates)."""
    try:
        content = Path(path).read_bytes()
    except OSError as error:
        raise TlsFileError(f"{name}={path}: cannot read it: {error.strerror}") from None
    if b"-----BEGIN " not in content:
        raise TlsFileError(f"{name}={path}: not a PEM file")
    if ca:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
        except ssl.SSLError as error:
            raise TlsFileError(
                f"{name}={path}: not PEM certificates ({error.reason or error})"
            ) from None
    return content
