"""Who a request came from, behind proxies (TRUERUN_TRUSTED_PROXIES; docs/gateway.md
"Client addresses").

A forwarded address (``Forwarded: for=...``, RFC 7239, else ``X-Forwarded-For``) is believed
only when it was added by a proxy this process trusts: the hops are read right to left from
the peer, each one believed only while the address that reported it is trusted. With no
trusted proxies (the default) the client is the peer, whatever the headers say. Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Hops read at most: a header listing more says nothing more about the client.
MAX_HOPS = 32


@dataclass(frozen=True, slots=True)
class TrustedProxies:
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> TrustedProxies:
        """Comma-separated addresses or CIDRs (``10.0.0.0/8, ::1``); ValueError names a bad
        entry."""
        networks: list[Network] = []
        for item in filter(None, (part.strip() for part in text.split(","))):
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(
                    f"{item!r} is not an IP address or CIDR (e.g. 10.0.0.5 or 10.0.0.0/8)"
                ) from None
        return cls(tuple(networks))

    def trusts(self, address: str) -> bool:
        parsed = _address(address)
        return parsed is not None and any(parsed in network for network in self.networks)

    def client(self, peer: str, forwarded: Sequence[str], x_forwarded_for: Sequence[str]) -> str:
        """The client's address: ``peer`` unless a trusted proxy reported another. The
        header values as received (a header may come several times); ``Forwarded`` wins
        over ``X-Forwarded-For`` when both are present."""
        if not self.networks or not self.trusts(peer):
            return peer
        hops = _forwarded_hops(forwarded) if forwarded else _xff_hops(x_forwarded_for)
        current = peer
        for hop in reversed(hops[-MAX_HOPS:]):
            if not self.trusts(current):
                break
            parsed = _address(hop)
            if parsed is None:  # "unknown", an obfuscated name, garbage: stop believing
                break
            current = str(parsed)
        return current


def _address(text: str) -> Address | None:
    value = text.strip().strip('"')
    if value.startswith("["):  # [v6] or [v6]:port
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:  # v4:port
        value = value.partition(":")[0]
    try:
        parsed = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return parsed.ipv4_mapped
    return parsed


def _xff_hops(values: Sequence[str]) -> list[str]:
    return [hop.strip() for value in values for hop in value.split(",") if hop.strip()]


def _forwarded_hops(values: Sequence[str]) -> list[str]:
    hops: list[str] = []
    for value in values:
        for element in value.split(","):
            found = ""
            for pair in element.split(";"):
                key, _, raw = pair.partition("=")
                if key.strip().lower() == "for":
                    found = raw.strip()
            hops.append(found)  # an element without for= is a hop we know nothing of
    return hops
