"""Which URLs a notice webhook may post to (docs/long-tasks.md "Notices", "Webhook URL
safety"), pure. Any token that sees a project may register a webhook, and the server then
posts from inside the deployment, so the URL is checked when it is registered and again
before every post (a name can come to resolve elsewhere):

- ``TRUERUN_NOTICE_WEBHOOK_ALLOW`` set (comma-separated ``host``, ``host:port``,
  ``*.domain`` or ``*.domain:port``): the URL's host (and port, when the pattern names one)
  must match one pattern; a host not listed is refused.
- empty: any host.
- always, whatever the list says: a host that is, or resolves to, a link-local address
  (169.254.0.0/16, fe80::/10, where every cloud's instance metadata lives) or another
  known metadata address, or is a metadata host name, is refused.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

#: Metadata endpoints outside the link-local ranges (AWS's IPv6 one, Alibaba's).
METADATA_ADDRESSES = frozenset({"fd00:ec2::254", "100.100.100.200"})
METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "metadata.goog"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_allow(setting: str) -> tuple[str, ...]:
    """The setting's patterns, lower-cased, blanks dropped."""
    return tuple(p.strip().lower() for p in setting.split(",") if p.strip())


def _forbidden_address(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_link_local or str(ip) in METADATA_ADDRESSES


def _matches(pattern: str, host: str, port: int) -> bool:
    wanted_host, _, wanted_port = (
        pattern.rpartition(":") if _has_port(pattern) else (pattern, "", "")
    )
    if wanted_port and wanted_port != str(port):
        return False
    wanted_host = wanted_host.strip("[]")
    if wanted_host.startswith("*."):
        return fnmatchcase(host, wanted_host) or host == wanted_host[2:]
    return host == wanted_host


def _has_port(pattern: str) -> bool:
    """``host:port`` or ``[v6]:port`` (a bare IPv6 address has colons but no port)."""
    if pattern.startswith("["):
        return "]:" in pattern
    return pattern.count(":") == 1


def url_refusal(url: str, allow: Sequence[str], addresses: Iterable[str] = ()) -> str | None:
    """Why the server will not post to ``url`` (None: it may). ``addresses``: what its host
    resolved to (nothing when it was not resolved)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme not in _DEFAULT_PORTS or not host:
        return "not an absolute http or https URL"
    try:
        port = parts.port or _DEFAULT_PORTS[parts.scheme]
    except ValueError:
        return "its port is not a number from 0 to 65535"
    if host in METADATA_HOSTS:
        return f"{host} is a cloud metadata host"
    for address in (host, *addresses):
        if _forbidden_address(address):
            return f"{host} is or resolves to {address}, a link-local or metadata address"
    if allow and not any(_matches(p, host, port) for p in allow):
        return f"{host}:{port} is not in TRUERUN_NOTICE_WEBHOOK_ALLOW"
    return None
