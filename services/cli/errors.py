"""How a client command ends when it cannot do its job: one line on stderr and exit 2, never
a traceback. A person's mistakes (a bad --server, a flag value out of range, an unknown run,
a refused token) and a server that cannot be reached all end this way; Ctrl-C ends with 130.

The exit statuses of every client command:

    0  done (``watch``: the run succeeded)
    1  ``watch`` only: the run ended and did not succeed
    2  truerun could not do it or could not tell: a usage error, a refusal, no server
  130  Ctrl-C
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections.abc import Callable

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
_PASSED_THROUGH = ("unix:", "dns:", "ipv4:", "ipv6:")  # gRPC's own target schemes
_FORM = "expected HOST:PORT or https://HOST:PORT"


def server_problem(server: str) -> str | None:
    """What is wrong with a ``--server`` address, found before anything is dialed (gRPC
    would say it late and in its own words, or dial another port); None: it can be dialed."""
    if server.startswith(_PASSED_THROUGH):
        return None
    address = server.removeprefix("https://")
    host, colon, port = address.rpartition(":")
    if "://" in address or not colon or not host or "/" in host:
        return f"--server {server!r}: {_FORM}"
    if host.startswith("["):
        if not host.endswith("]") or not _is_ip(host[1:-1]):
            return f"--server {server!r}: {host} is not an IPv6 address"
    elif ":" in host:
        return f"--server {server!r}: an IPv6 address goes in brackets, [::1]:PORT"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"--server {server!r}: the port must be a number from 1 to 65535"
    return None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # what the API's int32 fields hold


def at_least(minimum: int, maximum: int = INT32_MAX) -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``minimum`` to ``maximum`` (argparse turns
    the ArgumentTypeError into a usage error: one line, exit 2), checked here so that an
    out-of-range number is said before anything is sent."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is out of range (at least {minimum})")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{value} is out of range (at most {maximum})")
        return value

    parse.__name__ = f"a number >= {minimum}"
    return parse


def int32(text: str) -> int:
    """An argparse ``type``: any whole number an int32 field holds (``--priority``)."""
    return at_least(INT32_MIN)(text)


def say(message: str, code: str) -> int:
    """One line on stderr, ``error: message [CODE]``; the exit status for it."""
    print(f"error: {' '.join(message.split())} [{code}]", file=sys.stderr, flush=True)
    return EXIT_ERROR
