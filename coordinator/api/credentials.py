"""API bearer tokens: who a caller is (a non-secret name, the projects it sees, its role
there, the owners it may act for), and a bound on failed authentications. Only hashes of the
tokens are kept; comparisons are constant-time. A failure meets the bound only after the
token was checked (``FailureLimit``). Shared by every gRPC service and the gateway.
What each role may do is one table, coordinator/api/authorization.py (docs/tenancy.md).

``TRUERUN_API_TOKENS``: entries separated by ``;`` (or one per line in the file
``TRUERUN_API_TOKENS_FILE`` names; ``#`` starts a comment), each
``[NAME=]TOKEN:PROJECT[,PROJECT...][:SEGMENT...]``. ``*`` is every project. ``NAME`` is the
actor recorded on what the token does (default ``token-<12 hex of its hash>``). Segments:

- ``operator``: the audited operator commands, and acting for every owner of its projects;
- ``service``: truerun's own service identity (capacity observations and claims); every
  project, no person's commands;
- ``owners=O1,O2`` (``*`` = every owner): the owners it may act for. Default: a named
  person acts for themself only (their NAME), an app's unnamed token and an operator for
  every owner of their projects;
- ``groups=G1,G2``: the approver groups a person belongs to (docs/state-model.md).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.domain.redaction import register_secret
from kernel.auth_bound import SlidingBound, fingerprint, retry_after_seconds
from kernel.errors import TooManyFailures

ALL_PROJECTS = "*"
ALL_OWNERS = "*"
OPERATOR = "operator"
SERVICE = "service"
_SPEC = (
    "API tokens are [name=]token:project[,project...][:operator|:service][:owners=o1,o2]"
    "[:groups=g1,g2] entries separated by ';' (project * = all projects, owner * = all owners)"
)


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
    #: The owners this token may act for (ALL_OWNERS: every owner of its projects).
    owners: frozenset[str] = frozenset({ALL_OWNERS})
    #: truerun's own service identity: capacity observations and claims, nothing else.
    service: bool = False
    #: The approver groups of a person (docs/state-model.md "Approvals").
    groups: frozenset[str] = frozenset()

    def sees(self, project_id: str) -> bool:
        # A service token reads no person's objects: it reports and claims, nothing else.
        if self.service:
            return False
        return ALL_PROJECTS in self.projects or project_id in self.projects

    def acts_for(self, owner_id: str) -> bool:
        """Whether this token may act for ``owner_id`` (in a project it sees)."""
        return self.operator or ALL_OWNERS in self.owners or owner_id in self.owners

    @property
    def all_projects(self) -> bool:
        return ALL_PROJECTS in self.projects


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: str
    principal: Principal


def _names(text: str) -> frozenset[str]:
    return frozenset(filter(None, (n.strip() for n in text.split(","))))


def _entry(item: str) -> _Entry:
    """One ``[name=]token:projects[:segment...]`` entry (the module's docstring)."""
    head, _, rest = item.partition(":")
    name, _, token = head.rpartition("=")
    name, token = name.strip(), token.strip()
    scope_text, *segments = rest.split(":")
    scope = _names(scope_text)
    if not token or not scope:
        raise ValueError(_SPEC)
    roles: set[str] = set()
    owners: frozenset[str] | None = None
    groups: frozenset[str] = frozenset()
    for segment in (s.strip() for s in segments):
        key, eq, value = segment.partition("=")
        if not eq and segment in (OPERATOR, SERVICE):
            roles.add(segment)
        elif eq and key == "owners" and _names(value):
            owners = _names(value)
        elif eq and key == "groups" and _names(value):
            groups = _names(value)
        else:
            raise ValueError(_SPEC)
    if len(roles) > 1 or (SERVICE in roles and scope != {ALL_PROJECTS}):
        raise ValueError("a service token is one role and sees every project (*)")
    operator, service = OPERATOR in roles, SERVICE in roles
    if owners is None:  # a person acts for themself; an app or an operator for every owner
        person = name and not operator and not service
        owners = frozenset({name}) if person else frozenset({ALL_OWNERS})
    digest = _digest(token)
    principal = Principal(
        name=name or f"token-{digest[:12]}",
        projects=scope,
        operator=operator,
        named=bool(name),
        owners=owners,
        service=service,
        groups=groups,
    )
    register_secret(token)  # redacted by value wherever it would be logged
    return _Entry(digest, principal)


class ApiTokens:
    def __init__(self, entries: list[_Entry]) -> None:
        self._entries = list(entries)

    @classmethod
    def parse(cls, spec: str) -> ApiTokens:
        entries: list[_Entry] = []
        lines = (line for line in spec.splitlines() if not line.lstrip().startswith("#"))
        parts = (part.strip() for line in lines for part in line.split(";"))
        for item in filter(None, parts):
            entries.append(_entry(item))
        return cls(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def joined(self, other: ApiTokens) -> ApiTokens:
        """These tokens and ``other``'s (`truerun dev`'s services add their gateway's own)."""
        return ApiTokens([*self._entries, *other._entries])

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
    """The door's bound on failed authentications (kernel/auth_bound.py): at most ``limit``
    failures per (source, credential fingerprint) and ``per_source`` (default 5 x ``limit``)
    per source within ``window_s``. Only failures meet it: the door checks the credential
    first, so a valid one is never refused, whatever its source sent before."""

    def __init__(
        self,
        limit: int = 20,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        per_source: int | None = None,
    ) -> None:
        self.limit = limit
        self.per_source = per_source if per_source is not None else 5 * limit
        self.window_s = window_s
        self._pairs = SlidingBound(limit, window_s, clock)
        self._sources = SlidingBound(self.per_source, window_s, clock)

    def refusal(self, source: str, credential: str) -> float | None:
        """None while this failure may be answered as such (401), else the seconds until
        it may (429 / RESOURCE_EXHAUSTED with that wait)."""
        waits = [
            wait
            for wait in (
                self._pairs.refusal((source, fingerprint(credential))),
                self._sources.refusal(source),
            )
            if wait is not None
        ]
        return max(waits) if waits else None

    def failed(self, source: str, credential: str) -> None:
        self._pairs.failed((source, fingerprint(credential)))
        self._sources.failed(source)

    def refuse(self, source: str, credential: str) -> TooManyFailures | None:
        """The refusal of one more failure of ``credential`` from ``source`` past the
        bound; else None, and the failure is counted."""
        wait = self.refusal(source, credential)
        if wait is not None:
            return TooManyFailures(
                "too many failed authentications; wait", retry_after_s=retry_after_seconds(wait)
            )
        self.failed(source, credential)
        return None


def bearer(value: str) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` value ('' when there is none)."""
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""
