"""API bearer tokens: who a caller is (a non-secret name, the projects it sees, whether it
may use the operator commands), and a bound on failed authentications. Only hashes of the
tokens are kept; comparisons are constant-time. Shared by every gRPC service and the gateway.

``TRUERUN_API_TOKENS``: entries separated by ``;`` (or one per line in the file
``TRUERUN_API_TOKENS_FILE`` names; ``#`` starts a comment), each
``[NAME=]TOKEN:PROJECT[,PROJECT...][:operator]``. ``*`` is every project. ``NAME`` is the
actor recorded on what the token does (default ``token-<12 hex of its hash>``);
``:operator`` allows the audited operator commands (resolve, fail, pause, resume, requeue).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.domain.redaction import register_secret

ALL_PROJECTS = "*"
OPERATOR = "operator"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a valid token is: a short, non-secret name (the actor of what it does), what it
    may see, and whether it is an operator."""

    name: str
    projects: frozenset[str]
    operator: bool = False
    named: bool = False  # a person's name was configured (else the name is the token's hash)

    def sees(self, project_id: str) -> bool:
        return ALL_PROJECTS in self.projects or project_id in self.projects

    @property
    def all_projects(self) -> bool:
        return ALL_PROJECTS in self.projects


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: str
    principal: Principal


class ApiTokens:
    def __init__(self, entries: list[_Entry]) -> None:
        self._entries = list(entries)

    @classmethod
    def parse(cls, spec: str) -> ApiTokens:
        entries: list[_Entry] = []
        lines = (line for line in spec.splitlines() if not line.lstrip().startswith("#"))
        parts = (part.strip() for line in lines for part in line.split(";"))
        for item in filter(None, parts):
            head, _, rest = item.partition(":")
            name, _, token = head.rpartition("=")
            names, _, role = rest.partition(":")
            scope = frozenset(filter(None, (n.strip() for n in names.split(","))))
            token = token.strip()
            if not token or not scope or role.strip() not in ("", OPERATOR):
                raise ValueError(
                    "API tokens are [name=]token:project[,project...][:operator] entries "
                    "separated by ';' (project * = all projects)"
                )
            digest = _digest(token)
            principal = Principal(
                name=name.strip() or f"token-{digest[:12]}",
                projects=scope,
                operator=role.strip() == OPERATOR,
                named=bool(name.strip()),
            )
            entries.append(_Entry(digest, principal))
            register_secret(token)  # redacted by value wherever it would be logged
        return cls(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def authenticate(self, token: str) -> Principal | None:
        if not token:
            return None
        digest = _digest(token)
        found: Principal | None = None
        # Compare against every entry so the time taken says nothing about which one matched.
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, digest):
                found = entry.principal
        return found


class FailureLimit:
    """At most ``limit`` failed authentications per source within ``window_s``; past that
    the source is refused (429 / RESOURCE_EXHAUSTED) until old failures leave the window."""

    def __init__(
        self, limit: int = 20, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def blocked(self, source: str) -> bool:
        failures = self._failures.get(source)
        if not failures:
            return False
        horizon = self._clock() - self.window_s
        while failures and failures[0] < horizon:
            failures.popleft()
        if not failures:
            del self._failures[source]
            return False
        return len(failures) >= self.limit

    def failed(self, source: str) -> None:
        self._failures.setdefault(source, deque()).append(self._clock())
        if len(self._failures) > 10_000:  # bounded memory under a spray of sources
            self._failures.pop(next(iter(self._failures)))


def bearer(value: str) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` value ('' when there is none)."""
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""
