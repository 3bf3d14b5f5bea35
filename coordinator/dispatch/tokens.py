"""Runtime and callback tokens. Only hashes are stored; comparisons are constant-time."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from coordinator.domain.redaction import register_secret

ANY_OWNER = "*"


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


class RuntimeTokens:
    """Which runtime token may act for which owner (``*``: any owner, for the embedded mode)."""

    def __init__(self, owners_by_token_hash: Mapping[str, str]) -> None:
        self._owners = dict(owners_by_token_hash)

    @classmethod
    def parse(cls, spec: str) -> RuntimeTokens:
        """``owner:token;owner2:token2`` (from TRUERUN_RUNTIME_TOKENS)."""
        owners: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in spec.split(";"))):
            owner, _, token = item.partition(":")
            if not owner or not token:
                raise ValueError("runtime tokens are owner:token pairs separated by ';'")
            owners[token_hash(token)] = owner
            register_secret(token)  # redacted by value wherever it would be stored or logged
        return cls(owners)

    def owner_of(self, token: str) -> str | None:
        """The owner this token acts for (ANY_OWNER for the embedded token), or None."""
        digest = token_hash(token)
        for known, owner in self._owners.items():
            if hmac.compare_digest(known, digest):
                return owner
        return None

    def allows(self, token: str, owner_id: str) -> bool:
        return self.owner_of(token) in (owner_id, ANY_OWNER)
