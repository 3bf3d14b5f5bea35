"""Runtime and callback tokens. Only hashes are stored; comparisons are constant-time."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.domain.redaction import register_secret

ANY_OWNER = "*"
ALL_PROJECTS = "*"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def callback_token_valid(
    token: str, stored_hash: str | None, expires_at_ms: int | None, now_ms: int
) -> bool:
    if not token or stored_hash is None:
        return False
    if expires_at_ms is not None and now_ms > expires_at_ms:
        return False
    return hmac.compare_digest(token_hash(token), stored_hash)


@dataclass(frozen=True, slots=True)
class Binding:
    """What a runtime token may serve (docs/tenancy.md): one owner (``*``: any, the
    embedded token) in some projects (``*``: every project)."""

    owner: str
    projects: frozenset[str] = frozenset({ALL_PROJECTS})

    def serves(self, owner_id: str, project_id: str) -> bool:
        return self.owner in (owner_id, ANY_OWNER) and (
            ALL_PROJECTS in self.projects or project_id in self.projects
        )

    @property
    def claimable_projects(self) -> list[str] | None:
        """The projects a claim for this runtime may take runs of (None: every project)."""
        return None if ALL_PROJECTS in self.projects else sorted(self.projects)


class RuntimeTokens:
    """Which runtime token may act for which owner in which projects, chosen by whoever
    issues the tokens (TRUERUN_RUNTIME_TOKENS)."""

    def __init__(self, bindings_by_token_hash: Mapping[str, str | Binding]) -> None:
        self._bindings = {
            digest: binding if isinstance(binding, Binding) else Binding(binding)
            for digest, binding in bindings_by_token_hash.items()
        }

    @classmethod
    def parse(cls, spec: str) -> RuntimeTokens:
        """``owner:token[:project,project...];...`` (from TRUERUN_RUNTIME_TOKENS); no
        projects = every project."""
        bindings: dict[str, Binding] = {}
        for item in filter(None, (part.strip() for part in spec.split(";"))):
            owner, _, rest = item.partition(":")
            token, _, projects_text = rest.partition(":")
            projects = frozenset(filter(None, (p.strip() for p in projects_text.split(","))))
            if not owner or not token or (projects_text and not projects):
                raise ValueError(
                    "runtime tokens are owner:token[:project,project...] entries separated "
                    "by ';' (no projects, or *, = every project)"
                )
            bindings[token_hash(token)] = Binding(owner, projects or frozenset({ALL_PROJECTS}))
            register_secret(token)  # redacted by value wherever it would be stored or logged
        return cls(bindings)

    def binding_of(self, token: str) -> Binding | None:
        """What this token may serve, or None for a token not issued."""
        digest = token_hash(token)
        found: Binding | None = None
        for known, binding in self._bindings.items():
            if hmac.compare_digest(known, digest):
                found = binding
        return found

    def owner_of(self, token: str) -> str | None:
        """The owner this token acts for (ANY_OWNER for the embedded token), or None."""
        binding = self.binding_of(token)
        return binding.owner if binding is not None else None

    def allows(self, token: str, owner_id: str) -> bool:
        return self.owner_of(token) in (owner_id, ANY_OWNER)

    def serves(self, owner_id: str, project_id: str) -> bool:
        """Whether some runtime token serves ``owner_id`` in ``project_id``: else work
        created there could never be delivered (OWNER_NOT_SERVED)."""
        return any(b.serves(owner_id, project_id) for b in self._bindings.values())
