"""A run's approval: what it requires (how many distinct approvers, from which groups, whether
its creator may be one, until when) and the grants given so far (docs/state-model.md
"Approvals"). Plain data and its stored form; the decision is ``decide.approval``.

Windmill's approval steps are the model for the policy's second half: a required count of
approvers, the groups they must belong to, self-approval refused on request, an expiry. Who
an approver is and which groups they belong to come from their credential (the API token),
never from the request.

The run keeps the whole approval as one JSON column (``runs.approval``), so every read of a
run shows what it requires and who approved without a second read; each grant is also a row
of ``run_approvals``, unique per (run, approver), written in the same transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from kernel.records import fast

#: Bounds of a policy (the API refuses a policy outside them).
MAX_REQUIRED_APPROVERS = 20
MAX_APPROVER_GROUPS = 20
MAX_EXPIRE_AFTER_MS = 366 * 86_400_000


class ApprovalPolicy(NamedTuple):
    """Who must approve a run before it is queued. A NamedTuple: its form in a request's
    fingerprint (coordinator/domain/fingerprints.py) is its fields in this order, so a
    field is only ever appended, with a default."""

    #: How many distinct approvers must approve.
    required: int = 1
    #: An approver must belong to one of these groups (sorted); empty: anyone who may act
    #: on the run.
    groups: tuple[str, ...] = ()
    #: The run's creator may not approve it.
    refuse_self: bool = False
    #: The approval closes this long after the run is created; 0: never.
    expire_after_ms: int = 0


#: One approver, anyone, never closing: what plain ``requires_approval`` asks for.
DEFAULT_POLICY = ApprovalPolicy()


@fast
@dataclass(frozen=True, slots=True)
class Grant:
    """One approver's approval: who (the token's actor), the groups it counted for (the
    approver's groups among those the policy names) and when."""

    approver: str
    groups: tuple[str, ...]
    granted_at_ms: int


@fast
@dataclass(frozen=True, slots=True)
class Approval:
    """What a run requires and who gave it so far, oldest grant first."""

    policy: ApprovalPolicy
    #: When the approval closes (the run's creation + ``expire_after_ms``); None: never.
    expires_at_ms: int | None = None
    grants: tuple[Grant, ...] = ()

    @property
    def remaining(self) -> int:
        """How many more distinct approvers are needed (0: approved)."""
        return max(self.policy.required - len(self.grants), 0)

    def grant_of(self, approver: str) -> Grant | None:
        return next((g for g in self.grants if g.approver == approver), None)


def opened(policy: ApprovalPolicy, now_ms: int) -> Approval:
    """A new run's approval: nothing granted, closing ``expire_after_ms`` from now."""
    expires = now_ms + policy.expire_after_ms if policy.expire_after_ms > 0 else None
    return Approval(policy, expires, ())


#: The approval of a run that waits for one but keeps none (created before runs kept their
#: approval, migration 0024): one approver, anyone.
LEGACY = Approval(DEFAULT_POLICY)


def encode(approval: Approval | None) -> str | None:
    """The stored form (compact JSON, sorted keys); None for a run that needs no approval."""
    if approval is None:
        return None
    p = approval.policy
    document: dict[str, Any] = {
        "required": p.required,
        "groups": list(p.groups),
        "refuse_self": p.refuse_self,
        "expire_after_ms": p.expire_after_ms,
        "expires_at_ms": approval.expires_at_ms,
        "grants": [
            {"approver": g.approver, "groups": list(g.groups), "at_ms": g.granted_at_ms}
            for g in approval.grants
        ],
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True)


def decode(text: str | None) -> Approval | None:
    if text is None:
        return None
    document = json.loads(text)
    policy = ApprovalPolicy(
        required=int(document.get("required", 1)),
        groups=tuple(document.get("groups", ())),
        refuse_self=bool(document.get("refuse_self", False)),
        expire_after_ms=int(document.get("expire_after_ms", 0)),
    )
    grants = tuple(
        Grant(g["approver"], tuple(g.get("groups", ())), int(g["at_ms"]))
        for g in document.get("grants", ())
    )
    return Approval(policy, document.get("expires_at_ms"), grants)
