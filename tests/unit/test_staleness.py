"""What a heartbeat vouches for (coordinator/domain/staleness.py), exhaustively over the
dimensions that decide it: listed or not, confirmed or not, how old the fence and the last
evidence are, already stale or not, and whether the runtime names its queue."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Final

import pytest

from coordinator.domain import staleness
from coordinator.domain.display import explain
from coordinator.domain.model import Attempt, runtime_task_id_for
from coordinator.domain.states import AttemptStatus as A
from coordinator.domain.states import DisplayState as D
from coordinator.domain.states import ObservedState as O
from coordinator.domain.states import RunStatus as R
from coordinator.domain.states import SyncState as S
from tests.unit.test_display_state import make_run

NOW: Final = 1_800_000_000_000
START_TIMEOUT: Final = 10_000
GRACE: Final = 2_000


def attempt(
    observed: O, sync: S, fence_age_ms: int, evidence_age_ms: int | None, n: int = 1
) -> Attempt:
    return Attempt(
        id=f"att-{n}",
        run_id=f"run-{n}",
        attempt_no=1,
        previous_attempt_id=None,
        owner_id="o",
        agent_id=None,
        execution_scope=None,
        runtime_task_id=runtime_task_id_for(f"att-{n}"),
        status=A.RUNNING if observed is O.RUNNING else A.STARTING,
        observed_state=observed,
        sync_state=sync,
        created_at_ms=NOW - 100_000,
        updated_at_ms=NOW - 1,
        start_requested_at_ms=NOW - fence_age_ms,
        observed_at_ms=None if evidence_age_ms is None else NOW - evidence_age_ms,
        runtime_instance_id="rt-1",
    )


def expected(a: Attempt, listed: bool, lists_queue: bool) -> str:
    """The rule, written out once more as a table a person can check."""
    if listed:
        return "renew"
    fence_age = NOW - (a.start_requested_at_ms or 0)
    if a.observed_state is O.UNCONFIRMED:
        in_grace = fence_age < START_TIMEOUT + GRACE
    else:
        evidence_age = NOW - (a.observed_at_ms or 0) if a.observed_at_ms else fence_age
        in_grace = min(fence_age, evidence_age) < GRACE
    if in_grace or (a.observed_state is O.ACCEPTED and not lists_queue):
        return "renew"
    return "none" if a.sync_state is S.STALE else "missing"


AGES = (0, GRACE - 1, GRACE, START_TIMEOUT + GRACE - 1, START_TIMEOUT + GRACE, 600_000)
CASES = [
    case
    for case in itertools.product(
        (O.UNCONFIRMED, O.ACCEPTED, O.RUNNING),
        (S.IN_SYNC, S.PENDING, S.STALE),
        AGES,  # of the start fence
        (None, *AGES),  # of the last evidence
        (True, False),  # listed
        (True, False),  # lists_queue
    )
    if case[3] is None or case[3] <= case[2]  # evidence never precedes the fence
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_each_started_attempt_is_renewed_judged_missing_or_left(
    case: tuple[O, S, int, int | None, bool, bool],
) -> None:
    observed, sync, fence_age, evidence_age, listed, lists_queue = case
    a = attempt(observed, sync, fence_age, evidence_age)
    vouched = staleness.vouch(
        [a],
        {a.runtime_task_id} if listed else {"rt-other"},
        lists_queue=lists_queue,
        now_ms=NOW,
        start_timeout_ms=START_TIMEOUT,
        grace_ms=GRACE,
    )
    got = "renew" if vouched.renew else "missing" if vouched.missing else "none"
    assert got == expected(a, listed, lists_queue)
    assert not (vouched.renew and vouched.missing)


def test_a_heartbeat_sorts_many_attempts_independently() -> None:
    listed = attempt(O.RUNNING, S.IN_SYNC, 60_000, 30_000, n=1)
    gone = attempt(O.RUNNING, S.IN_SYNC, 60_000, 30_000, n=2)
    fresh = attempt(O.ACCEPTED, S.IN_SYNC, 500, 400, n=3)
    asked = attempt(O.RUNNING, S.STALE, 60_000, 30_000, n=4)
    vouched = staleness.vouch(
        [listed, gone, fresh, asked],
        {listed.runtime_task_id},
        lists_queue=True,
        now_ms=NOW,
        start_timeout_ms=START_TIMEOUT,
        grace_ms=GRACE,
    )
    assert vouched.renew == (listed.id, fresh.id)
    assert vouched.missing == (gone,)


def test_an_attempt_missing_from_heartbeats_shows_unknown_with_that_reason() -> None:
    a = attempt(O.RUNNING, S.STALE, 60_000, 30_000)
    a = replace(a, sync_reason=staleness.not_listed("rt-1", NOW))
    shown = explain(make_run(R.DISPATCHING, a), a)
    assert shown.state is D.UNKNOWN
    assert shown.reason == (
        "runtime rt-1 is up but does not list this task since 2027-01-15 08:00:00Z; "
        "asked it what became of the task; capacity is held"
    )
    assert shown.since_ms == a.observed_at_ms  # unknown since the last evidence


def test_the_sentences_name_what_truerun_knows() -> None:
    a = attempt(O.RUNNING, S.IN_SYNC, 60_000, 30_000)
    a = replace(a, lease_expires_at_ms=NOW)
    assert staleness.lease_lapsed(a) == (
        "the lease lapsed at 2027-01-15 08:00:00Z (last evidence 2027-01-15 07:59:30Z)"
    )
    silent = attempt(O.UNCONFIRMED, S.IN_SYNC, 60_000, None)
    assert "no evidence since the start" in staleness.lease_lapsed(silent)
    assert staleness.start_unanswered(10_000) == (
        "the runtime did not answer the start within 10 s"
    )
