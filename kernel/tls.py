"""TLS for every listener and every gRPC client of a truerun process, from PEM files named
by the settings (docs/operations.md, "TLS"). The one way a server process builds them:

- ``server_tls(settings)``: None (plaintext) or the checked server files, which give gRPC
  its ``grpc.ServerCredentials``, uvicorn its ``ssl_certfile``/``ssl_keyfile`` and the
  Prometheus endpoint its ``certfile``/``keyfile``;
- ``aio_channel`` / ``sync_channel``: a channel, TLS or plaintext as the target and the
  client files say (the rule is truerun_runtime/_tls.py's, shared with the agent).

Every problem with a file is a ConfigError: one line, before anything is opened.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from kernel.config import ConfigError, Settings
from truerun_runtime._tls import TlsFileError, TlsFiles, channel_target, read_pair, read_pem

__all__ = [
    "DEV_PLAINTEXT",
    "PLAINTEXT",
    "ServerTls",
    "TlsFiles",
    "aio_channel",
    "checked_target",
    "client_files",
    "is_loopback",
    "listening",
    "require_loopback",
    "server_tls",
    "sync_channel",
]

#: What a production process without TLS files prints after its "... listening on" lines.
PLAINTEXT = (
    "plaintext (no TLS): set TRUERUN_TLS_CERT_FILE and TRUERUN_TLS_KEY_FILE, or terminate "
    "TLS in front of this process"
)
#: What `truerun dev` prints instead: it binds loopback only when plaintext.
DEV_PLAINTEXT = "plaintext on loopback (no TLS): for one machine only"


@dataclass(frozen=True, slots=True)
class ServerTls:
    """Checked server files: a certificate and its key, and for mTLS the client CA."""

    cert_file: str
    key_file: str
    client_ca_file: str
    cert: bytes
    key: bytes
    client_ca: bytes | None

    @property
    def mode(self) -> str:
        """What the "... listening on" lines say: ``tls`` or, when gRPC asks for client
        certificates, ``mtls``."""
        return "mtls" if self.client_ca is not None else "tls"

    def grpc_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


def server_tls(settings: Settings) -> ServerTls | None:
    """The server files, read and checked; None when neither certificate nor key is set."""
    if settings.tls_client_ca_file and not settings.tls_cert_file:
        raise ConfigError(
            "TRUERUN_TLS_CLIENT_CA_FILE needs TRUERUN_TLS_CERT_FILE and TRUERUN_TLS_KEY_FILE "
            "(mTLS is TLS that also checks the client)"
        )
    try:
        cert, key = read_pair(
            settings.tls_cert_file,
            settings.tls_key_file,
            "TRUERUN_TLS_CERT_FILE",
            "TRUERUN_TLS_KEY_FILE",
        )
        client_ca = None
        if settings.tls_client_ca_file:
            client_ca = read_pem(settings.tls_client_ca_file, "TRUERUN_TLS_CLIENT_CA_FILE", ca=True)
    except TlsFileError as error:
        raise ConfigError(str(error)) from None
    if cert is None or key is None:
        return None
    return ServerTls(
        settings.tls_cert_file,
        settings.tls_key_file,
        settings.tls_client_ca_file,
        cert,
        key,
        client_ca,
    )


def client_files(settings: Settings) -> TlsFiles:
    return TlsFiles(
        settings.tls_ca_file, settings.tls_client_cert_file, settings.tls_client_key_file
    )


def checked_target(target: str, files: TlsFiles) -> tuple[str, grpc.ChannelCredentials | None]:
    """``channel_target`` with its errors as ConfigError (call it at startup to fail early)."""
    try:
        return channel_target(target, files)
    except TlsFileError as error:
        raise ConfigError(str(error)) from None


def aio_channel(
    target: str,
    files: TlsFiles,
    *,
    options: Sequence[tuple[str, Any]] = (),
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
) -> grpc.aio.Channel:
    address, credentials = checked_target(target, files)
    if credentials is None:
        return grpc.aio.insecure_channel(
            address, options=list(options), interceptors=list(interceptors)
        )
    return grpc.aio.secure_channel(
        address, credentials, options=list(options), interceptors=list(interceptors)
    )


def sync_channel(
    target: str, files: TlsFiles, *, options: Sequence[tuple[str, Any]] = ()
) -> grpc.Channel:
    address, credentials = checked_target(target, files)
    if credentials is None:
        return grpc.insecure_channel(address, options=list(options))
    return grpc.secure_channel(address, credentials, options=list(options))


def listening(kind: str, address: str, tls: ServerTls | None) -> str:
    """``grpc listening on HOST:PORT (tls)``: the line operators (and tests) read to learn
    where and how a listener serves. Plaintext keeps the bare line (its parsers anchor at
    the port); only gRPC asks for client certificates, so only its line may say mtls."""
    if tls is None:
        return f"{kind} listening on {address}"
    return f"{kind} listening on {address} ({tls.mode if kind == 'grpc' else 'tls'})"


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost; an empty host or a wildcard means every interface."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # another host name: it may resolve off loopback


def require_loopback(settings: Settings, command: str) -> None:
    """A plaintext `truerun dev` serves tokens and run data unencrypted, so it binds loopback
    only: any other address is a ConfigError telling how to turn TLS on."""
    for name, address in (
        ("TRUERUN_GRPC_ADDR", settings.grpc_addr),
        ("TRUERUN_HTTP_ADDR", settings.http_addr),
        ("TRUERUN_METRICS_ADDR", settings.metrics_addr),
    ):
        host = address.rpartition(":")[0]
        if not is_loopback(host):
            raise ConfigError(
                f"{command} is plaintext (no TLS) and binds loopback only, not "
                f"{name}={address}: use 127.0.0.1, or set TRUERUN_TLS_CERT_FILE and "
                "TRUERUN_TLS_KEY_FILE"
            )
