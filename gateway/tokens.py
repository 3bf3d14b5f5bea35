"""API bearer tokens scoped to projects. Only hashes are kept; comparisons are constant-time."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from coordinator.domain.redaction import register_secret

ALL_PROJECTS = "*"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a valid token is: a short, non-secret name (for the actor on commands) and what it
    may see."""

    name: str
    projects: frozenset[str]

    def sees(self, project_id: str) -> bool:
        return ALL_PROJECTS in self.projects or project_id in self.projects


class ApiTokens:
    """``token:projA,projB;token2:*`` (TRUERUN_API_TOKENS, or one entry per line in the file
    TRUERUN_API_TOKENS_FILE names; lines starting with # are comments)."""

    def __init__(self, projects_by_digest: dict[str, frozenset[str]]) -> None:
        self._projects = dict(projects_by_digest)

    @classmethod
    def parse(cls, spec: str) -> ApiTokens:
        projects: dict[str, frozenset[str]] = {}
        lines = (line for line in spec.splitlines() if not line.lstrip().startswith("#"))
        parts = (part.strip() for line in lines for part in line.split(";"))
        for item in filter(None, parts):
            token, _, names = item.partition(":")
            scope = frozenset(filter(None, (n.strip() for n in names.split(","))))
            if not token.strip() or not scope:
                raise ValueError(
                    "API tokens are token:project[,project...] entries separated by ';' "
                    "(project * = all projects)"
                )
            projects[_digest(token.strip())] = scope
            register_secret(token.strip())  # redacted by value wherever it would be logged
        return cls(projects)

    def __len__(self) -> int:
        return len(self._projects)

    def authenticate(self, token: str) -> Principal | None:
        if not token:
            return None
        digest = _digest(token)
        found: frozenset[str] | None = None
        # Compare against every entry so the time taken says nothing about which one matched.
        for known, scope in self._projects.items():
            if hmac.compare_digest(known, digest):
                found = scope
        if found is None:
            return None
        return Principal(name=f"token-{digest[:12]}", projects=found)
