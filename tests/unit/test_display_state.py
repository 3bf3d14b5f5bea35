"""The display state: DESIGN.md's fixed priority list, exhaustively (docs/state-model.md).

1. run terminal -> that terminal state (a stale sync never turns a terminal into unknown)
2. cancel requested after the start fence -> cancelling
3. sync stale after the start fence -> unknown
4. observed running -> running
5. observed accepted -> waiting_runtime
6. attempt claimed or starting -> starting
7. otherwise the run status
Heartbeats never change the display state.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Final

import pytest

from coordinator.domain.display import Display, display_state, explain
from coordinator.domain.model import Attempt, Run, runtime_task_id_for
from coordinator.domain.states import AttemptStatus as A
from coordinator.domain.states import DisplayState as D
from coordinator.domain.states import ObservedState as O
from coordinator.domain.states import RunStatus as R
from coordinator.domain.states import ScopePolicy
from coordinator.domain.states import SyncState as S

NOW: Final = 1_700_000_000_000
FENCE_AT: Final = NOW - 4_000
OBSERVED_AT: Final = NOW - 2_000
CANCEL_AT: Final = NOW - 1_000
FINISHED_AT: Final = NOW - 100
CLAIMED_AT: Final = NOW - 5_000
UPDATED_AT: Final = NOW - 50


def make_attempt(
    status: A = A.QUEUED,
    *,
    fenced: bool = False,
    observed: O = O.UNCONFIRMED,
    sync: S = S.PENDING,
    attempt_id: str = "att-1",
) -> Attempt:
    return Attempt(
        id=attempt_id,
        run_id="run-1",
        attempt_no=1,
        previous_attempt_id=None,
        owner_id="owner-1",
        agent_id="agent-1",
        execution_scope=None,
        runtime_task_id=runtime_task_id_for(attempt_id),
        status=status,
        observed_state=observed,
        sync_state=sync,
        created_at_ms=NOW - 60_000,
        updated_at_ms=UPDATED_AT,
        observed_at_ms=OBSERVED_AT if observed is not O.UNCONFIRMED else None,
        claimed_at_ms=CLAIMED_AT if status is not A.QUEUED else None,
        start_requested_at_ms=FENCE_AT if fenced else None,
        runtime_instance_id="inst-1" if status is not A.QUEUED else None,
        last_event_seq=3 if observed is not O.UNCONFIRMED else 0,
        lease_token="lease-1" if status in (A.CLAIMED, A.STARTING, A.RUNNING) else None,
        lease_expires_at_ms=NOW + 20_000,
        heartbeat_at_ms=NOW - 300,
    )


def make_run(status: R, attempt: Attempt | None, *, cancel: bool = False) -> Run:
    return Run(
        id="run-1",
        project_id="proj-1",
        owner_id="owner-1",
        task_id="task-1",
        task_revision=0,
        agent_id="agent-1",
        execution_scope=None,
        scope_policy=ScopePolicy.QUEUE,
        trigger_type="api",
        trigger_id=None,
        idempotency_key=None,
        retry_of_run_id=None,
        priority=0,
        max_attempts=1,
        idempotent=False,
        run_now=False,
        pinned_runtime_instance_id=None,
        required_labels=(),
        spec={},
        status=status,
        version=3,
        event_sequence=5,
        current_attempt_id=attempt.id if attempt else None,
        attempt_count=1 if attempt else 0,
        created_by="user-1",
        created_at_ms=NOW - 60_000,
        updated_at_ms=UPDATED_AT,
        finished_at_ms=FINISHED_AT if status.terminal else None,
        cancel_requested_at_ms=CANCEL_AT if cancel else None,
    )


TERMINAL: Final = {
    R.SUCCEEDED: D.SUCCEEDED,
    R.FAILED: D.FAILED,
    R.CANCELLED: D.CANCELLED,
    R.TIMED_OUT: D.TIMED_OUT,
}
NON_TERMINAL: Final = {
    R.PENDING_APPROVAL: D.PENDING_APPROVAL,
    R.QUEUED: D.QUEUED,
    R.DISPATCHING: D.STARTING,
    R.RUNNING: D.RUNNING,
    R.WAITING_APPROVAL: D.WAITING_APPROVAL,
    R.RETRY_WAIT: D.RETRY_WAIT,
    R.LOST: D.LOST,
    R.PAUSED: D.PAUSED,
    R.DEAD_LETTER: D.DEAD_LETTER,
}


def test_every_run_status_has_a_display_state() -> None:
    assert set(TERMINAL) | set(NON_TERMINAL) == set(R)
    for status, shown in (TERMINAL | NON_TERMINAL).items():
        assert display_state(make_run(status, None), None) is shown


# -- the priority list, every combination of its conditions ---------------------------------

CONDITIONS: Final = (
    "cancel_after_fence",
    "stale_after_fence",
    "observed_running",
    "observed_accepted",
    "claimed_or_starting",
)


@dataclass(frozen=True)
class Combo:
    run_status: R
    conditions: frozenset[str]
    attempt_status: A

    @property
    def id(self) -> str:
        held = "+".join(k for k in CONDITIONS if k in self.conditions) or "none"
        return f"{self.run_status.value}:{held}:{self.attempt_status.value}"

    def build(self) -> tuple[Run, Attempt]:
        has = self.conditions.__contains__
        observed = (
            O.RUNNING
            if has("observed_running")
            else O.ACCEPTED
            if has("observed_accepted")
            else O.UNCONFIRMED
        )
        attempt = make_attempt(
            self.attempt_status,
            # runtime evidence only exists after the fence
            fenced=any(
                map(
                    has,
                    (
                        "cancel_after_fence",
                        "stale_after_fence",
                        "observed_running",
                        "observed_accepted",
                    ),
                )
            ),
            observed=observed,
            sync=S.STALE if has("stale_after_fence") else S.IN_SYNC,
        )
        return make_run(self.run_status, attempt, cancel=has("cancel_after_fence")), attempt

    def expected(self) -> D:
        """DESIGN.md's list, read literally: the first condition that holds wins."""
        if self.run_status.terminal:
            return TERMINAL[self.run_status]
        for condition, shown in (
            ("cancel_after_fence", D.CANCELLING),
            ("stale_after_fence", D.UNKNOWN),
            ("observed_running", D.RUNNING),
            ("observed_accepted", D.WAITING_RUNTIME),
            ("claimed_or_starting", D.STARTING),
        ):
            if condition in self.conditions:
                return shown
        return NON_TERMINAL[self.run_status]


def _combos() -> Iterator[Combo]:
    for run_status in R:
        for size in range(len(CONDITIONS) + 1):
            for held in itertools.combinations(CONDITIONS, size):
                if {"observed_running", "observed_accepted"} <= set(held):
                    continue  # one observed state at a time
                statuses = (
                    (A.CLAIMED, A.STARTING)
                    if "claimed_or_starting" in held
                    else (A.QUEUED, A.RUNNING)
                )
                for attempt_status in statuses:
                    yield Combo(run_status, frozenset(held), attempt_status)


COMBOS: Final = list(_combos())


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: c.id)
def test_priority_list(combo: Combo) -> None:
    run, attempt = combo.build()
    assert display_state(run, attempt) is combo.expected()


def test_every_rule_of_the_priority_list_is_reached() -> None:
    shown = {combo.expected() for combo in COMBOS}
    assert {D.CANCELLING, D.UNKNOWN, D.RUNNING, D.WAITING_RUNTIME, D.STARTING} <= shown
    assert set(TERMINAL.values()) | set(NON_TERMINAL.values()) <= shown


# -- the rules as DESIGN.md states them, on reachable states --------------------------------


def _case(
    run_status: R, attempt: Attempt | None, shown: D, *, cancel: bool = False, id: str
) -> object:
    return pytest.param(make_run(run_status, attempt, cancel=cancel), attempt, shown, id=id)


STARTING_FENCED: Final = make_attempt(A.STARTING, fenced=True)
RUNNING_IN_SYNC: Final = make_attempt(A.RUNNING, fenced=True, observed=O.RUNNING, sync=S.IN_SYNC)
RUNNING_STALE: Final = make_attempt(A.RUNNING, fenced=True, observed=O.RUNNING, sync=S.STALE)

CASES: Final = [
    *(
        _case(
            status,
            make_attempt(attempt_status, fenced=True, observed=observed, sync=S.STALE),
            shown,
            cancel=status is R.CANCELLED,
            id=f"terminal_beats_stale:{status.value}",
        )
        for status, shown, attempt_status, observed in (
            (R.SUCCEEDED, D.SUCCEEDED, A.SUCCEEDED, O.SUCCEEDED),
            (R.FAILED, D.FAILED, A.FAILED, O.FAILED),
            (R.CANCELLED, D.CANCELLED, A.CANCELLED, O.CANCELLED),
            (R.TIMED_OUT, D.TIMED_OUT, A.TIMED_OUT, O.FAILED),
        )
    ),
    _case(
        R.CANCELLED,
        make_attempt(A.CANCELLED),
        D.CANCELLED,
        cancel=True,
        id="cancel_before_fence_is_cancelled",
    ),
    _case(R.CANCELLED, None, D.CANCELLED, cancel=True, id="cancel_while_pending_approval"),
    _case(R.DISPATCHING, STARTING_FENCED, D.CANCELLING, cancel=True, id="cancelling:starting"),
    _case(R.RUNNING, RUNNING_IN_SYNC, D.CANCELLING, cancel=True, id="cancelling:running"),
    _case(R.RUNNING, RUNNING_STALE, D.CANCELLING, cancel=True, id="cancelling_beats_unknown"),
    _case(
        R.DISPATCHING,
        make_attempt(A.STARTING, fenced=True, sync=S.STALE),
        D.UNKNOWN,
        id="unknown:start_outcome_lost",
    ),
    _case(
        R.DISPATCHING,
        make_attempt(A.STARTING, fenced=True, observed=O.ACCEPTED, sync=S.STALE),
        D.UNKNOWN,
        id="unknown_beats_waiting_runtime",
    ),
    _case(R.RUNNING, RUNNING_STALE, D.UNKNOWN, id="unknown_beats_running"),
    _case(
        R.DISPATCHING,
        make_attempt(A.CLAIMED, sync=S.STALE),
        D.STARTING,
        id="stale_before_fence_is_not_unknown",
    ),
    _case(R.RUNNING, RUNNING_IN_SYNC, D.RUNNING, id="observed_running"),
    _case(
        R.DISPATCHING,
        make_attempt(A.STARTING, fenced=True, observed=O.ACCEPTED, sync=S.IN_SYNC),
        D.WAITING_RUNTIME,
        id="accepted_is_waiting_runtime",
    ),
    _case(R.DISPATCHING, make_attempt(A.CLAIMED), D.STARTING, id="claimed_is_starting"),
    _case(R.DISPATCHING, STARTING_FENCED, D.STARTING, id="start_sent_is_starting"),
    _case(R.PENDING_APPROVAL, None, D.PENDING_APPROVAL, id="run_status:pending_approval"),
    _case(R.QUEUED, make_attempt(A.QUEUED), D.QUEUED, id="run_status:queued"),
    _case(
        R.RETRY_WAIT,
        make_attempt(A.FAILED, fenced=True, observed=O.FAILED, sync=S.IN_SYNC),
        D.RETRY_WAIT,
        id="run_status:retry_wait",
    ),
    _case(R.LOST, make_attempt(A.LOST, fenced=True), D.LOST, id="run_status:lost"),
    _case(R.WAITING_APPROVAL, None, D.WAITING_APPROVAL, id="run_status:waiting_approval"),
]


@pytest.mark.parametrize(("run", "attempt", "shown"), CASES)
def test_design_rules(run: Run, attempt: Attempt | None, shown: D) -> None:
    assert display_state(run, attempt) is shown
    assert explain(run, attempt).state is shown


@pytest.mark.parametrize(
    ("observed", "sync"),
    [
        (O.RUNNING, S.IN_SYNC),
        (O.RUNNING, S.STALE),
        (O.ACCEPTED, S.IN_SYNC),
        (O.UNCONFIRMED, S.STALE),
    ],
    ids=["obs_running", "obs_running_stale", "obs_accepted", "stale"],
)
def test_a_lost_run_is_shown_lost(observed: O, sync: S) -> None:
    """MarkLost keeps the attempt's last evidence: a run lost while running is reachable."""
    attempt = make_attempt(A.LOST, fenced=True, observed=observed, sync=sync)
    assert display_state(make_run(R.LOST, attempt), attempt) is D.LOST


# -- invariants over every combination -------------------------------------------------------


def _all_states() -> Iterator[tuple[Run, Attempt | None]]:
    for run_status, cancel in itertools.product(R, (False, True)):
        yield make_run(run_status, None, cancel=cancel), None
        for status, fenced, observed, sync in itertools.product(A, (False, True), O, S):
            attempt = make_attempt(status, fenced=fenced, observed=observed, sync=sync)
            yield make_run(run_status, attempt, cancel=cancel), attempt


ALL_STATES: Final = list(_all_states())


def test_terminal_runs_show_their_terminal_state_whatever_the_attempt_says() -> None:
    for run, attempt in ALL_STATES:
        if run.status.terminal:
            assert display_state(run, attempt) is TERMINAL[run.status]


def test_heartbeat_fields_never_change_the_display() -> None:
    variants = list(
        itertools.product(
            (None, NOW - 3_600_000, NOW + 3_600_000),  # heartbeat_at_ms
            (None, NOW - 3_600_000, NOW + 3_600_000),  # lease_expires_at_ms
            (None, "lease-other"),  # lease_token
        )
    )
    for run, attempt in ALL_STATES:
        if attempt is None:
            continue
        shown = explain(run, attempt)
        for heartbeat, lease_expires, token in variants:
            beat = replace(
                attempt,
                heartbeat_at_ms=heartbeat,
                lease_expires_at_ms=lease_expires,
                lease_token=token,
            )
            assert explain(run, beat) == shown


def test_only_the_current_attempt_counts() -> None:
    for run, attempt in ALL_STATES:
        if attempt is not None:
            other = replace(run, current_attempt_id="att-newer")
            assert explain(other, attempt) == explain(other, None)


def test_unknown_and_cancelling_need_the_start_fence() -> None:
    for run, attempt in ALL_STATES:
        if attempt is None or not attempt.fenced:
            assert display_state(run, attempt) not in (D.UNKNOWN, D.CANCELLING)


@pytest.mark.parametrize("run_status", [R.DISPATCHING, R.QUEUED])
def test_a_claimed_unfenced_attempt_is_never_shown_running(run_status: R) -> None:
    """A claim is not a start: whatever its sync, lease or heartbeat says."""
    for sync, heartbeat in itertools.product(S, (None, NOW, NOW + 60_000)):
        attempt = replace(make_attempt(A.CLAIMED, sync=sync), heartbeat_at_ms=heartbeat)
        assert display_state(make_run(run_status, attempt), attempt) is D.STARTING


@pytest.mark.parametrize("observed", [O.RUNNING, O.ACCEPTED])
def test_runtime_evidence_without_a_fence_is_not_believed(observed: O) -> None:
    attempt = make_attempt(A.CLAIMED, observed=observed, sync=S.IN_SYNC)
    assert display_state(make_run(R.DISPATCHING, attempt), attempt) is D.STARTING


# -- reason and since --------------------------------------------------------------------------


def test_since_points_at_the_fact_that_decided_the_state() -> None:
    def since(run: Run, attempt: Attempt | None) -> int | None:
        shown: Display = explain(run, attempt)
        assert shown.reason
        return shown.since_ms

    done = make_attempt(A.SUCCEEDED, fenced=True, observed=O.SUCCEEDED, sync=S.IN_SYNC)
    assert since(make_run(R.SUCCEEDED, done), done) == FINISHED_AT
    assert since(make_run(R.RUNNING, RUNNING_IN_SYNC, cancel=True), RUNNING_IN_SYNC) == CANCEL_AT
    assert since(make_run(R.RUNNING, RUNNING_STALE), RUNNING_STALE) == OBSERVED_AT
    blind = make_attempt(A.STARTING, fenced=True, sync=S.STALE)
    assert since(make_run(R.DISPATCHING, blind), blind) == FENCE_AT
    assert since(make_run(R.RUNNING, RUNNING_IN_SYNC), RUNNING_IN_SYNC) == OBSERVED_AT
    claimed = make_attempt(A.CLAIMED)
    assert since(make_run(R.DISPATCHING, claimed), claimed) == CLAIMED_AT
    assert since(make_run(R.DISPATCHING, STARTING_FENCED), STARTING_FENCED) == FENCE_AT
    assert since(make_run(R.QUEUED, make_attempt()), make_attempt()) == UPDATED_AT


def test_terminal_reason_is_the_error_code() -> None:
    run = replace(make_run(R.FAILED, None), error_code="process_exit_error")
    assert explain(run, None).reason == "process_exit_error"
