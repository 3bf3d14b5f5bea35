"""Approvals with both halves of scope (issue #36, finding 7 and build item 6), over real gRPC
on SQLite and PostgreSQL: N distinct approvers from named groups, the creator refused when the
policy says so, an expiry, one grant per approver however approvals race, and a retry of a
run that required approval requires it again (docs/state-model.md "Approvals").

Who approves, and in which groups, is the approving token's: each person below has a token
of their own (``groups=`` in its spec), and a request's ``actor`` is ignored. What was written
is read back from the database directly (``run_approvals``, ``run_events``), never through
the store under test. Time is a fake clock (tests/support/clock.py), never a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

import asyncpg
import grpc
from google.protobuf import duration_pb2, json_format
from truerun.v1 import common_pb2, run_service_pb2, run_service_pb2_grpc

from coordinator.store.base import RunStore
from kernel.db.migrate import downgrade, upgrade
from tests.integration.test_run_service_grpc import (
    all_events,
    create,
    create_request,
    expect_error,
)
from tests.support.auth import aio_channel
from tests.support.clock import Clock
from tests.support.grpc_server import GrpcApi, grpc_run_service

if TYPE_CHECKING:
    from truerun.v1.run_service_pb2_grpc import RunServiceAsyncStub

R = run_service_pb2
RS = common_pb2.RunStatus
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
WAIT = 10.0  # seconds; an upper bound for what must happen, never a sleep

#: People of proj-a, each a token that acts for every owner there: carol creates the runs,
#: alice and bob are in ops, dave is in dev only.
PEOPLE = {
    "carol": "ops",
    "alice": "ops",
    "bob": "ops,qa",
    "dave": "dev",
}
TOKENS = ";".join(
    f"{name}=tok-{name}:proj-a:owners=*:groups={groups}" for name, groups in PEOPLE.items()
)


class People:
    """A RunService stub per person, each calling with that person's own token."""

    def __init__(self, stubs: dict[str, RunServiceAsyncStub]) -> None:
        self._stubs = stubs

    def __getitem__(self, name: str) -> Any:
        return self._stubs[name]

    def approve(self, name: str, run_id: str, **fields: Any) -> Any:
        return self._stubs[name].ApproveRun(R.ApproveRunRequest(id=run_id, **fields))


@asynccontextmanager
async def people(api: GrpcApi) -> AsyncIterator[People]:
    async with contextlib.AsyncExitStack() as stack:
        stubs: dict[str, RunServiceAsyncStub] = {}
        for name in PEOPLE:
            channel = await stack.enter_async_context(aio_channel(api.address, f"tok-{name}"))
            stubs[name] = run_service_pb2_grpc.RunServiceStub(channel)
        yield People(stubs)


def policy(**fields: Any) -> common_pb2.ApprovalPolicy:
    return common_pb2.ApprovalPolicy(**fields)


async def create_as(
    who: People, name: str, approval: common_pb2.ApprovalPolicy, **fields: Any
) -> common_pb2.Run:
    response = await who[name].CreateRun(create_request(approval=approval, **fields))
    run: common_pb2.Run = response.run
    return run


async def grant_rows(database_url: str, run_id: str) -> list[tuple[str, str]]:
    """The run's ``run_approvals`` rows: (approver, groups JSON), in grant order."""
    sql = (
        "SELECT approver, approver_groups FROM run_approvals WHERE run_id = {} "
        "ORDER BY granted_at_ms, approver"
    )
    if database_url.startswith("sqlite:///"):
        path = database_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            return [tuple(row) for row in conn.execute(sql.format("?"), (run_id,))]
    conn = await asyncpg.connect(database_url)
    try:
        return [tuple(row) for row in await conn.fetch(sql.format("$1"), run_id)]
    finally:
        await conn.close()


def types(events: Sequence[common_pb2.RunEvent]) -> list[str]:
    return [e.type for e in events]


# -- the finding ----------------------------------------------------------------------------


async def test_a_retry_of_a_run_that_required_approval_requires_it_again(
    migrated_database_url: str,
) -> None:
    """Issue #36, finding 7, the README's ``nap`` example: submit --requires-approval, cancel,
    retry. The retry was queued at once, and no read said the run had required approval or
    who gave it. Now the retry waits in pending_approval, and the run says both."""
    async with grpc_run_service(migrated_database_url, migrate=False) as api:
        stub = api.stub
        nap = await create(api, requires_approval=True)
        cancelled = await stub.CancelRun(R.CancelRunRequest(id=nap.id))
        assert cancelled.run.status == RS.RUN_STATUS_CANCELLED

        retry = await stub.RetryRun(R.RetryRunRequest(id=nap.id))

        assert retry.retry_of_run_id == nap.id
        assert retry.status == RS.RUN_STATUS_PENDING_APPROVAL
        assert retry.approval.remaining == 1 and not retry.approval.grants
        assert not retry.HasField("current_attempt")
        assert types(await all_events(api, retry.id)) == ["run.created"]

        # An approved run that ended (cancelled once queued) also asks again, and still
        # says who approved it and when.
        deploy = await create(api, requires_approval=True)
        approved = await stub.ApproveRun(R.ApproveRunRequest(id=deploy.id))
        assert approved.status == RS.RUN_STATUS_QUEUED
        assert [g.approver for g in approved.approval.grants] == ["tester"]
        assert approved.approval.grants[0].grant_time.ToMilliseconds() > 0
        await stub.CancelRun(R.CancelRunRequest(id=deploy.id))
        again = await stub.RetryRun(R.RetryRunRequest(id=deploy.id))
        assert again.status == RS.RUN_STATUS_PENDING_APPROVAL
        assert again.approval.remaining == 1 and not again.approval.grants
        source = await stub.GetRun(R.GetRunRequest(id=deploy.id))
        assert [g.approver for g in source.approval.grants] == ["tester"]

        queued = await stub.ApproveRun(R.ApproveRunRequest(id=again.id))
        assert queued.status == RS.RUN_STATUS_QUEUED


# -- N of a group ---------------------------------------------------------------------------


async def test_two_of_a_group_one_grant_waits_the_second_queues_a_non_member_is_refused(
    migrated_database_url: str,
) -> None:
    async with (
        grpc_run_service(migrated_database_url, migrate=False, tokens=TOKENS) as api,
        people(api) as who,
    ):
        run = await create_as(who, "carol", policy(required_approvals=2, approver_groups=["ops"]))
        assert run.status == RS.RUN_STATUS_PENDING_APPROVAL
        assert run.created_by == "carol"
        assert list(run.approval.policy.approver_groups) == ["ops"]
        assert run.approval.policy.required_approvals == 2 and run.approval.remaining == 2

        first = await who.approve("alice", run.id)
        assert first.status == RS.RUN_STATUS_PENDING_APPROVAL
        assert first.version == run.version + 1
        assert [(g.approver, list(g.groups)) for g in first.approval.grants] == [("alice", ["ops"])]
        assert first.approval.remaining == 1
        assert "approve" in first.allowed_commands

        # dave is in dev only; the groups are the token's, so naming alice as the actor of
        # the request changes nothing
        await expect_error(who.approve("dave", run.id), PERMISSION_DENIED, "APPROVER_NOT_ELIGIBLE")
        await expect_error(
            who.approve("dave", run.id, actor=common_pb2.Actor(id="alice")),
            PERMISSION_DENIED,
            "APPROVER_NOT_ELIGIBLE",
        )
        # a grant counts once
        await expect_error(
            who.approve("alice", run.id), grpc.StatusCode.ALREADY_EXISTS, "ALREADY_APPROVED"
        )
        still = await api.stub.GetRun(R.GetRunRequest(id=run.id))
        assert still.version == first.version and still.status == RS.RUN_STATUS_PENDING_APPROVAL

        second = await who.approve("bob", run.id)

        assert second.status == RS.RUN_STATUS_QUEUED
        assert second.current_attempt.attempt_no == 1
        assert [(g.approver, list(g.groups)) for g in second.approval.grants] == [
            ("alice", ["ops"]),
            ("bob", ["ops"]),  # bob's qa is not a group of the policy
        ]
        assert second.approval.remaining == 0
        events = await all_events(api, run.id)
        assert types(events) == [
            "run.created",
            "run.approval_granted",
            "run.approved",
            "run.queued",
        ]
        assert [e.actor.id for e in events[1:3]] == ["alice", "bob"]
        assert json_format.MessageToDict(events[2].payload) == {
            "from_status": "pending_approval",
            "approvals": 2.0,
            "required_approvals": 2.0,
            "approver_groups": "ops",
        }
        assert await grant_rows(migrated_database_url, run.id) == [
            ("alice", '["ops"]'),
            ("bob", '["ops"]'),
        ]
        await expect_error(
            who.approve("carol", run.id),
            grpc.StatusCode.FAILED_PRECONDITION,
            "INVALID_RUN_TRANSITION",
        )


async def test_self_approval_is_refused_when_the_policy_says_so(
    migrated_database_url: str,
) -> None:
    async with (
        grpc_run_service(migrated_database_url, migrate=False, tokens=TOKENS) as api,
        people(api) as who,
    ):
        strict = await create_as(
            who, "carol", policy(approver_groups=["ops"], refuse_self_approval=True)
        )
        assert strict.approval.policy.refuse_self_approval

        await expect_error(
            who.approve("carol", strict.id), PERMISSION_DENIED, "SELF_APPROVAL_REFUSED"
        )
        assert await grant_rows(migrated_database_url, strict.id) == []
        approved = await who.approve("alice", strict.id)
        assert approved.status == RS.RUN_STATUS_QUEUED

        # Without it the creator may approve their own run (plain requires_approval).
        lenient = await create_as(who, "carol", policy(approver_groups=["ops"]))
        assert (await who.approve("carol", lenient.id)).status == RS.RUN_STATUS_QUEUED

        # A retry's creator is whoever retried it: alice's retry of carol's run is alice's.
        await who["carol"].CancelRun(R.CancelRunRequest(id=strict.id))
        retry = await who["alice"].RetryRun(R.RetryRunRequest(id=strict.id))
        assert retry.created_by == "alice" and retry.approval.policy.refuse_self_approval
        await expect_error(
            who.approve("alice", retry.id), PERMISSION_DENIED, "SELF_APPROVAL_REFUSED"
        )
        assert (await who.approve("carol", retry.id)).status == RS.RUN_STATUS_QUEUED


async def test_an_approval_expires(migrated_database_url: str) -> None:
    clock = Clock()
    async with (
        grpc_run_service(migrated_database_url, migrate=False, tokens=TOKENS, clock=clock) as api,
        people(api) as who,
    ):
        window = duration_pb2.Duration(seconds=60)
        run = await create_as(
            who, "carol", policy(required_approvals=2, approver_groups=["ops"], expire_after=window)
        )
        assert run.approval.expire_time.ToMilliseconds() == clock.now + 60_000
        assert run.approval.policy.expire_after.ToMilliseconds() == 60_000

        clock.now += 59_999
        assert (await who.approve("alice", run.id)).approval.remaining == 1
        clock.now += 1  # the window is over: nothing more is granted

        await expect_error(
            who.approve("bob", run.id), grpc.StatusCode.FAILED_PRECONDITION, "APPROVAL_EXPIRED"
        )
        expired = await api.stub.GetRun(R.GetRunRequest(id=run.id))
        assert expired.status == RS.RUN_STATUS_PENDING_APPROVAL
        assert [g.approver for g in expired.approval.grants] == ["alice"]
        assert [a for a, _ in await grant_rows(migrated_database_url, run.id)] == ["alice"]

        # It can be cancelled, and its retry opens a new window of the same length.
        cancelled = await who["carol"].CancelRun(R.CancelRunRequest(id=run.id))
        assert cancelled.run.status == RS.RUN_STATUS_CANCELLED
        clock.now += 3_600_000
        retry = await who["carol"].RetryRun(R.RetryRunRequest(id=run.id))
        assert retry.approval.expire_time.ToMilliseconds() == clock.now + 60_000
        assert (await who.approve("alice", retry.id)).approval.remaining == 1
        assert (await who.approve("bob", retry.id)).status == RS.RUN_STATUS_QUEUED


# -- races ----------------------------------------------------------------------------------


class DecideTogether:
    """The real store, except that once armed for ``parties``, the next that many writes
    each wait until all of them are there: approvals that race for one run have all decided,
    on the same version, before either writes, and one of them loses the compare-and-set."""

    def __init__(self, inner: RunStore) -> None:
        self._inner = inner
        self._waiting = 0
        self._all_decided = asyncio.Event()
        self.writes = 0

    def arm(self, parties: int) -> None:
        self._waiting, self.writes = parties, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def apply(self, *args: Any) -> Any:
        self.writes += 1
        if self._waiting > 0:
            self._waiting -= 1
            if self._waiting == 0:
                self._all_decided.set()
            await asyncio.wait_for(self._all_decided.wait(), WAIT)
        return await self._inner.apply(*args)


def decide_together(gates: list[DecideTogether]) -> Callable[[RunStore], RunStore]:
    """A ``wrap_store`` that makes two racing approvals read the same version."""

    def wrap(store: RunStore) -> RunStore:
        gates.append(DecideTogether(store))
        return cast(RunStore, gates[0])  # delegates every other call (__getattr__)

    return wrap


async def test_two_approvers_racing_each_count_once_and_the_run_is_queued_once(
    migrated_database_url: str,
) -> None:
    gates: list[DecideTogether] = []
    async with (
        grpc_run_service(
            migrated_database_url, migrate=False, tokens=TOKENS, wrap_store=decide_together(gates)
        ) as api,
        people(api) as who,
    ):
        run = await create_as(who, "carol", policy(required_approvals=2, approver_groups=["ops"]))
        gates[0].arm(2)

        answers = await asyncio.wait_for(
            asyncio.gather(who.approve("alice", run.id), who.approve("bob", run.id)), WAIT
        )

        # One answer still pending with one grant, the other queued with both.
        by_status = sorted(answers, key=lambda a: a.version)
        assert [a.status for a in by_status] == [
            RS.RUN_STATUS_PENDING_APPROVAL,
            RS.RUN_STATUS_QUEUED,
        ]
        assert [len(a.approval.grants) for a in by_status] == [1, 2]
        # Both decided on the first version; one lost the compare-and-set and decided again
        # on the other's grant.
        assert gates[0].writes == 3
        final = await api.stub.GetRun(R.GetRunRequest(id=run.id))
        assert final.status == RS.RUN_STATUS_QUEUED and final.version == run.version + 2
        assert sorted(g.approver for g in final.approval.grants) == ["alice", "bob"]
        assert final.attempt_count == 1
        assert types(await all_events(api, run.id)) == [
            "run.created",
            "run.approval_granted",
            "run.approved",
            "run.queued",
        ]
        rows = await grant_rows(migrated_database_url, run.id)
        assert sorted(a for a, _ in rows) == ["alice", "bob"]


async def test_one_approver_twice_at_once_counts_once(migrated_database_url: str) -> None:
    gates: list[DecideTogether] = []
    async with (
        grpc_run_service(
            migrated_database_url, migrate=False, tokens=TOKENS, wrap_store=decide_together(gates)
        ) as api,
        people(api) as who,
    ):
        run = await create_as(who, "carol", policy(required_approvals=2, approver_groups=["ops"]))
        gates[0].arm(2)

        answers = await asyncio.wait_for(
            asyncio.gather(
                who.approve("alice", run.id), who.approve("alice", run.id), return_exceptions=True
            ),
            WAIT,
        )

        granted = [a for a in answers if isinstance(a, common_pb2.Run)]
        refused = [a for a in answers if isinstance(a, grpc.aio.AioRpcError)]
        assert len(granted) == 1 and len(refused) == 1, answers
        assert refused[0].code() == grpc.StatusCode.ALREADY_EXISTS
        assert granted[0].status == RS.RUN_STATUS_PENDING_APPROVAL
        final = await api.stub.GetRun(R.GetRunRequest(id=run.id))
        assert [g.approver for g in final.approval.grants] == ["alice"]
        assert final.version == run.version + 1
        assert await grant_rows(migrated_database_url, run.id) == [("alice", '["ops"]')]


# -- a retry asks again ---------------------------------------------------------------------


async def test_a_retry_of_an_approved_run_asks_again_with_the_same_requirement(
    migrated_database_url: str,
) -> None:
    async with (
        grpc_run_service(migrated_database_url, migrate=False, tokens=TOKENS) as api,
        people(api) as who,
    ):
        asked = policy(required_approvals=2, approver_groups=["ops"], refuse_self_approval=True)
        run = await create_as(who, "carol", asked)
        await who.approve("alice", run.id)
        approved = await who.approve("bob", run.id)
        assert approved.status == RS.RUN_STATUS_QUEUED
        await who["carol"].CancelRun(R.CancelRunRequest(id=run.id))

        retry = await who["carol"].RetryRun(R.RetryRunRequest(id=run.id))

        assert retry.status == RS.RUN_STATUS_PENDING_APPROVAL
        assert retry.retry_of_run_id == run.id and not retry.HasField("current_attempt")
        assert retry.approval.policy == approved.approval.policy == asked
        assert retry.approval.remaining == 2 and not retry.approval.grants
        assert await grant_rows(migrated_database_url, retry.id) == []
        # the same people approve it again, the same rules hold
        await expect_error(
            who.approve("carol", retry.id), PERMISSION_DENIED, "SELF_APPROVAL_REFUSED"
        )
        await expect_error(
            who.approve("dave", retry.id), PERMISSION_DENIED, "APPROVER_NOT_ELIGIBLE"
        )
        assert (await who.approve("bob", retry.id)).status == RS.RUN_STATUS_PENDING_APPROVAL
        assert (await who.approve("alice", retry.id)).status == RS.RUN_STATUS_QUEUED
        # the source run keeps its own grants
        source = await api.stub.GetRun(R.GetRunRequest(id=run.id))
        assert [g.approver for g in source.approval.grants] == ["alice", "bob"]


async def test_a_policy_out_of_bounds_is_refused_and_writes_nothing(
    migrated_database_url: str,
) -> None:
    async with grpc_run_service(migrated_database_url, migrate=False) as api:
        bad = {
            "too many approvers": policy(required_approvals=21),
            "negative count": policy(required_approvals=-1),
            "a bad group": policy(approver_groups=["no spaces"]),
            "too many groups": policy(approver_groups=[f"g{i}" for i in range(21)]),
            "negative expiry": policy(expire_after=duration_pb2.Duration(seconds=-1)),
            "sub-millisecond": policy(expire_after=duration_pb2.Duration(nanos=1)),
            "over a year": policy(expire_after=duration_pb2.Duration(seconds=367 * 86_400)),
        }
        for name, asked in bad.items():
            try:
                await api.stub.CreateRun(create_request(approval=asked))
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            else:
                raise AssertionError(f"{name} was accepted")
        listed = await api.stub.ListRuns(R.ListRunsRequest(project_id="proj-a"))
        assert not listed.runs


# -- runs from before 0024 ------------------------------------------------------------------


async def test_runs_from_before_keep_what_can_be_known_of_their_approval(
    migrated_database_url: str,
) -> None:
    """Migration 0024: a run pending approval requires one approver; a run approved before
    it (a run.approved event) required one and got it from that event's actor, so its retry
    asks again. Made at head, taken back to 0023 (the approvals gone), upgraded again."""
    async with grpc_run_service(migrated_database_url, migrate=False) as api:
        pending = await create(api, requires_approval=True)
        approved = await create(api, requires_approval=True)
        await api.stub.ApproveRun(R.ApproveRunRequest(id=approved.id))
        await api.stub.CancelRun(R.CancelRunRequest(id=approved.id))
        plain = await create(api)
    await downgrade(migrated_database_url, "0023_run_request_fingerprint")
    await upgrade(migrated_database_url)

    async with grpc_run_service(migrated_database_url, migrate=False) as api:
        stub = api.stub
        waiting = await stub.GetRun(R.GetRunRequest(id=pending.id))
        assert waiting.approval.remaining == 1 and not waiting.approval.grants
        source = await stub.GetRun(R.GetRunRequest(id=approved.id))
        assert [g.approver for g in source.approval.grants] == ["tester"]
        assert source.approval.remaining == 0
        assert not (await stub.GetRun(R.GetRunRequest(id=plain.id))).HasField("approval")
        assert [a for a, _ in await grant_rows(migrated_database_url, approved.id)] == ["tester"]
        retry = await stub.RetryRun(R.RetryRunRequest(id=approved.id))
        assert retry.status == RS.RUN_STATUS_PENDING_APPROVAL
        assert (await stub.ApproveRun(R.ApproveRunRequest(id=pending.id))).status == (
            RS.RUN_STATUS_QUEUED
        )
