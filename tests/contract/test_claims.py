"""The claim contract (seed A §2, §11, §14 capacity rows) on SQLite and on real PostgreSQL.

Every test wires the real capacity services over a migrated database (tests/support/capacity)
with the in-memory observation store, and checks what was written by reading the database
directly. "Keeps states" means every table is byte-identical before and after.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from truerun.v1 import capacity_service_pb2 as pb
from truerun.v1 import capacity_service_pb2_grpc

from capacity.observations.memory import MemoryObservationStore
from capacity.service.claims import Blocked, ClaimService
from coordinator.api.errors import reason_of
from coordinator.domain import commands as c
from coordinator.domain.decide import Decision
from coordinator.domain.model import Run
from coordinator.domain.states import AttemptStatus, SyncState
from coordinator.service.transitions import Transitions
from coordinator.store.base import (
    Applied,
    CasMiss,
    RunStore,
    RunTx,
)
from kernel.errors import AgentNotFound, WorkspaceNotIsolated
from kernel.ids import now_ms
from services.bootstrap import Capacity, Coordinator, capacity_sql
from services.server import create_server
from tests.support.auth import SERVICE_TOKEN, aio_channel, server_tokens
from tests.support.capacity import (
    LEASE_TTL_MS,
    LONG_TTL_MS,
    ManualClock,
    claim,
    fence,
    finish,
    git_workspace,
    live_attempts,
    observe,
    open_capacity,
    release,
    rows,
)
from tests.support.factories import SCHEDULER, spec
from tests.support.snapshot import snapshot

OWNER = "alice"  # the owner of every run spec() makes


@dataclass(frozen=True, slots=True)
class Wired:
    app: Coordinator
    cap: Capacity
    url: str

    async def runs(self, count: int, prefix: str = "t", **overrides: Any) -> list[Run]:
        made = []
        for n in range(count):
            made.append(
                (await self.app.transitions.create(spec(task_id=f"{prefix}{n}", **overrides))).run
            )
        return made


@pytest.fixture
async def wired(migrated_database_url: str) -> AsyncIterator[Wired]:
    async with open_capacity(migrated_database_url) as (app, cap):
        yield Wired(app, cap, migrated_database_url)


def tasks(outcome_claimed: Sequence[Any]) -> list[str]:
    return [item.run.task_id for item in outcome_claimed]


# --- §14: capacity heartbeat missing / expired / instance mismatch ---------------------------


async def test_missing_observation_stops_claims_and_keeps_states(wired: Wired) -> None:
    await wired.runs(3)
    await observe(wired.cap.reports, OWNER, "i1", 4)
    assert len((await claim(wired.cap, OWNER, "i1")).claimed) == 1
    memory = wired.cap.observations
    assert isinstance(memory, MemoryObservationStore)
    memory.clear()  # the observation is lost (a Redis flush, a restart)

    before = await snapshot(wired.url)
    outcome = await claim(wired.cap, OWNER, "i1", max_claims=3)
    assert outcome.claimed == ()
    assert outcome.blocked is Blocked.NO_FRESH_OBSERVATION
    view = await wired.cap.reports.occupancy(OWNER, "i1")
    assert not view.fresh and view.occupancy.free_slots == 0 and view.occupancy.limit == 0
    assert view.occupancy.durable_rows == 1  # the live claim is kept, never released
    assert await snapshot(wired.url) == before


async def test_expired_observation_stops_claims_and_keeps_states(
    migrated_database_url: str,
) -> None:
    clock = ManualClock()
    async with open_capacity(migrated_database_url, ttl_ms=1_000, clock=clock) as (app, cap):
        w = Wired(app, cap, migrated_database_url)
        await w.runs(3)
        await observe(cap.reports, OWNER, "i1", 4)
        clock.advance(999)
        assert len((await claim(cap, OWNER, "i1")).claimed) == 1
        clock.advance(1)  # exactly the TTL: still fresh
        assert (await cap.reports.occupancy(OWNER, "i1")).fresh
        clock.advance(1)

        before = await snapshot(migrated_database_url)
        outcome = await claim(cap, OWNER, "i1", max_claims=3)
        assert outcome.claimed == ()
        assert outcome.blocked is Blocked.NO_FRESH_OBSERVATION
        assert not (await cap.reports.occupancy(OWNER, "i1")).fresh
        assert await snapshot(migrated_database_url) == before


async def test_instance_mismatch_stops_claims_and_keeps_states(wired: Wired) -> None:
    await wired.runs(3)
    await observe(wired.cap.reports, OWNER, "i1", 4, routes=("dev-1", "dev-2"))
    assert len((await claim(wired.cap, OWNER, "i1", "dev-2")).claimed) == 1

    before = await snapshot(wired.url)
    other_instance = await claim(wired.cap, OWNER, "i2", "dev-1", max_claims=3)
    assert other_instance.claimed == ()
    assert other_instance.blocked is Blocked.NO_FRESH_OBSERVATION
    other_owner = await claim(wired.cap, "bob", "i1", "dev-1", max_claims=3)
    assert other_owner.claimed == ()
    assert other_owner.blocked is Blocked.NO_FRESH_OBSERVATION
    unknown_route = await claim(wired.cap, OWNER, "i1", "dev-9", max_claims=3)
    assert unknown_route.claimed == ()
    assert unknown_route.blocked is Blocked.UNKNOWN_ROUTE
    assert await snapshot(wired.url) == before


# --- §14: occupancy merged by runtime task id -------------------------------------------------


async def test_runtime_active_and_durable_claim_with_same_task_id_count_once(
    wired: Wired,
) -> None:
    limit = 4
    await wired.runs(6)
    await observe(wired.cap.reports, OWNER, "i1", limit)
    (first,) = (await claim(wired.cap, OWNER, "i1")).claimed
    task_id = first.attempt.runtime_task_id
    await observe(wired.cap.reports, OWNER, "i1", limit, [task_id])  # the runtime sees it

    occ = (await wired.cap.reports.occupancy(OWNER, "i1")).occupancy
    assert (occ.occupied, occ.runtime_active, occ.durable_rows) == (1, 1, 1)
    assert occ.durable_only_task_ids == ()
    assert occ.merged_task_ids == (task_id,)
    assert occ.free_slots == limit - 1

    more = await claim(wired.cap, OWNER, "i1", max_claims=6)
    assert len(more.claimed) == limit - 1  # D-1, not D-2
    assert more.blocked is Blocked.DEVICE_FULL
    occ = (await wired.cap.reports.occupancy(OWNER, "i1")).occupancy
    assert occ.occupied == limit and occ.free_slots == 0
    full = await claim(wired.cap, OWNER, "i1")
    assert full.claimed == () and full.blocked is Blocked.DEVICE_FULL


async def test_manual_runtime_task_and_undelivered_claim_both_count(wired: Wired) -> None:
    limit = 4
    await wired.runs(6)
    await observe(wired.cap.reports, OWNER, "i1", limit, ["manual-1"])
    (first,) = (await claim(wired.cap, OWNER, "i1")).claimed
    task_id = first.attempt.runtime_task_id

    occ = (await wired.cap.reports.occupancy(OWNER, "i1")).occupancy
    assert (occ.occupied, occ.runtime_active, occ.durable_rows) == (2, 1, 1)
    assert occ.durable_only_task_ids == (task_id,)
    assert set(occ.merged_task_ids) == {"manual-1", task_id}

    more = await claim(wired.cap, OWNER, "i1", max_claims=6)
    assert len(more.claimed) == limit - 2  # not max(1, 1) = 1 occupied
    assert (await wired.cap.reports.occupancy(OWNER, "i1")).occupancy.occupied == limit


# --- §14: agent concurrency R ------------------------------------------------------------------


async def test_agent_at_R_while_others_are_claimed_fairly(wired: Wired) -> None:
    for agent in ("A", "B", "C"):
        await wired.cap.agents.configure(agent, 1, "none", "", 1)
    await wired.runs(10, "a", agent_id="A")
    await wired.runs(1, "b", agent_id="B")
    await wired.runs(1, "c", agent_id="C")
    await observe(wired.cap.reports, OWNER, "i1", 10)

    first = await claim(wired.cap, OWNER, "i1", max_claims=3)
    assert sorted(tasks(first.claimed)) == ["a0", "b0", "c0"]  # A's head, and B's and C's
    second = await claim(wired.cap, OWNER, "i1", max_claims=3)
    assert second.claimed == ()
    assert second.blocked is Blocked.AGENT_LIMIT
    assert (await wired.cap.agents.get("A")).live_attempts == 1

    a_claim = next(item for item in first.claimed if item.run.agent_id == "A")
    await finish(wired.app.transitions, a_claim)
    third = await claim(wired.cap, OWNER, "i1", max_claims=3)
    assert tasks(third.claimed) == ["a1"]
    assert third.blocked is Blocked.AGENT_LIMIT


async def test_no_device_route_bypasses_R(wired: Wired, tmp_path: Path) -> None:
    await wired.cap.agents.configure("X", 2, "git", git_workspace(tmp_path / "repo"), 1)
    await wired.runs(6, agent_id="X")
    await observe(wired.cap.reports, OWNER, "i1", 5, routes=("dev-1", "dev-2"))
    await observe(wired.cap.reports, OWNER, "i2", 5, routes=("dev-3",))

    assert len((await claim(wired.cap, OWNER, "i1", "dev-1")).claimed) == 1
    assert len((await claim(wired.cap, OWNER, "i1", "dev-2")).claimed) == 1
    for instance, device in (("i2", "dev-3"), ("i1", "dev-1"), ("i1", "dev-2")):
        outcome = await claim(wired.cap, OWNER, instance, device, max_claims=3)
        assert outcome.claimed == () and outcome.blocked is Blocked.AGENT_LIMIT
    live = await live_attempts(wired.url)
    assert sorted(row["runtime_device_id"] for row in live) == ["dev-1", "dev-2"]
    assert {row["runtime_instance_id"] for row in live} == {"i1"}
    assert (await wired.cap.reports.occupancy(OWNER, "i1")).occupancy.occupied == 2

    # Concurrently, from every route of both instances: still never more than R = 2.
    for item in live:
        await wired.app.transitions.execute(c.ReleaseBeforeFence(item["run_id"], SCHEDULER))
    outcomes = await asyncio.gather(
        claim(wired.cap, OWNER, "i1", "dev-1", max_claims=2),
        claim(wired.cap, OWNER, "i1", "dev-2", max_claims=2),
        claim(wired.cap, OWNER, "i2", "dev-3", max_claims=2),
    )
    assert sum(len(outcome.claimed) for outcome in outcomes) == 2
    assert len(await live_attempts(wired.url)) == 2


async def test_non_git_workspace_rejected_for_R_above_1(wired: Wired, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for kind in ("git", "directory", "none"):
        with pytest.raises(WorkspaceNotIsolated):
            await wired.cap.agents.configure("X", 2, kind, str(plain), 1)
    with pytest.raises(AgentNotFound):
        await wired.cap.agents.get("X")  # nothing was saved
    assert await rows(wired.url, "SELECT * FROM agents") == []

    # An agent already at R = 1 on that directory keeps its configuration.
    await wired.cap.agents.configure("Y", 1, "directory", str(plain), 1)
    with pytest.raises(WorkspaceNotIsolated):
        await wired.cap.agents.configure("Y", 3, "directory", str(plain), 1)
    assert (await wired.cap.agents.get("Y")).config.concurrency == 1

    repo = git_workspace(tmp_path / "repo")
    view = await wired.cap.agents.configure("X", 2, "git", repo, 1)
    assert view.config.concurrency == 2
    await wired.runs(3, agent_id="X")
    await observe(wired.cap.reports, OWNER, "i1", 10)
    outcome = await claim(wired.cap, OWNER, "i1", max_claims=3)
    assert len(outcome.claimed) == 2
    paths = [item.workspace_path for item in outcome.claimed]
    assert len(set(paths)) == 2
    assert all(
        p.startswith(f"{repo}/") and item.attempt.id in p
        for p, item in zip(paths, outcome.claimed, strict=True)
    )
    # The "again before Start" check belongs to the runtime protocol (not this service).


# --- §14: run now on a full runtime --------------------------------------------------------


async def test_run_now_on_a_full_runtime_never_exceeds_D(wired: Wired) -> None:
    await wired.runs(4)
    await observe(wired.cap.reports, OWNER, "i1", 2)
    live = (await claim(wired.cap, OWNER, "i1", max_claims=2)).claimed
    assert tasks(live) == ["t0", "t1"]
    (urgent,) = await wired.runs(1, "now", run_now=True)

    full = await claim(wired.cap, OWNER, "i1", max_claims=2)
    assert full.claimed == () and full.blocked is Blocked.DEVICE_FULL
    assert (await wired.cap.reports.occupancy(OWNER, "i1")).occupancy.occupied == 2

    await release(wired.app.transitions, live[0])  # t0 is back in the queue, before t2, t3
    after = await claim(wired.cap, OWNER, "i1", max_claims=2)
    assert [item.run.id for item in after.claimed] == [urgent.id]
    assert after.claimed[0].run.run_now
    assert after.blocked is Blocked.DEVICE_FULL
    assert (await wired.cap.reports.occupancy(OWNER, "i1")).occupancy.occupied == 2


# --- unknown keeps its slot ----------------------------------------------------------------


async def test_unknown_attempt_keeps_its_slot(wired: Wired) -> None:
    await wired.runs(2, agent_id="A")  # A is not configured: R = 1
    await observe(wired.cap.reports, OWNER, "i1", 1)
    (item,) = (await claim(wired.cap, OWNER, "i1")).claimed
    await fence(wired.app.transitions, item)
    result = await wired.app.transitions.execute(c.DispatchUnknown(item.run.id, SCHEDULER))
    assert result.attempt is not None
    assert result.attempt.status is AttemptStatus.STARTING
    assert result.attempt.sync_state is SyncState.STALE

    occ = (await wired.cap.reports.occupancy(OWNER, "i1")).occupancy
    assert occ.occupied == 1 and occ.durable_only_task_ids == (item.attempt.runtime_task_id,)
    await observe(wired.cap.reports, OWNER, "i1", 2)  # room on the device, not for agent A
    outcome = await claim(wired.cap, OWNER, "i1")
    assert outcome.claimed == () and outcome.blocked is Blocked.AGENT_LIMIT
    await observe(wired.cap.reports, OWNER, "i1", 1)
    outcome = await claim(wired.cap, OWNER, "i1")
    assert outcome.claimed == () and outcome.blocked is Blocked.DEVICE_FULL


# --- pinning, labels, scopes ---------------------------------------------------------------


async def test_pinned_run_only_claimed_by_its_instance(wired: Wired) -> None:
    (pinned,) = await wired.runs(1, "pinned", pinned_runtime_instance_id="i2")
    (free,) = await wired.runs(1, "free")
    await observe(wired.cap.reports, OWNER, "i1", 5)
    await observe(wired.cap.reports, OWNER, "i2", 5)

    first = await claim(wired.cap, OWNER, "i1", max_claims=5)
    assert [item.run.id for item in first.claimed] == [free.id]
    again = await claim(wired.cap, OWNER, "i1", max_claims=5)
    assert again.claimed == () and again.blocked is Blocked.NOTHING_ELIGIBLE
    mine = await claim(wired.cap, OWNER, "i2", max_claims=5)
    assert [item.run.id for item in mine.claimed] == [pinned.id]
    assert mine.claimed[0].attempt.runtime_instance_id == "i2"


async def test_required_labels_must_be_reported(wired: Wired) -> None:
    (gpu,) = await wired.runs(1, "gpu", required_labels=("gpu", "linux"))
    await observe(wired.cap.reports, OWNER, "i1", 5, labels=("linux",))
    await observe(wired.cap.reports, OWNER, "i2", 5, labels=("gpu", "linux", "x86"))

    before = await snapshot(wired.url)
    partial = await claim(wired.cap, OWNER, "i1", max_claims=5)
    assert partial.claimed == () and partial.blocked is Blocked.NOTHING_ELIGIBLE
    assert await snapshot(wired.url) == before
    full = await claim(wired.cap, OWNER, "i2", max_claims=5)
    assert [item.run.id for item in full.claimed] == [gpu.id]


async def test_a_run_needing_an_unreported_label_does_not_block_its_lane(wired: Wired) -> None:
    await wired.runs(1, "gpu", required_labels=("gpu",))
    (plain,) = await wired.runs(1, "plain")
    await observe(wired.cap.reports, OWNER, "i1", 5)  # no labels
    outcome = await claim(wired.cap, OWNER, "i1", max_claims=1)
    assert [item.run.id for item in outcome.claimed] == [plain.id]


async def test_scope_gate_one_live_attempt_per_scope(wired: Wired) -> None:
    s1, s2 = await wired.runs(2, "s", execution_scope="repo-x")
    (other,) = await wired.runs(1, "y", execution_scope="repo-y")
    await observe(wired.cap.reports, OWNER, "i1", 10)
    await observe(wired.cap.reports, OWNER, "i2", 10)

    first = await claim(wired.cap, OWNER, "i1", max_claims=3)
    assert sorted(item.run.id for item in first.claimed) == sorted([s1.id, other.id])
    assert first.blocked is Blocked.SCOPE_BUSY
    for instance in ("i1", "i2"):  # the scope is global, not per runtime
        outcome = await claim(wired.cap, OWNER, instance, max_claims=3)
        assert outcome.claimed == () and outcome.blocked is Blocked.SCOPE_BUSY

    await finish(wired.app.transitions, next(i for i in first.claimed if i.run.id == s1.id))
    after = await claim(wired.cap, OWNER, "i2", max_claims=3)
    assert [item.run.id for item in after.claimed] == [s2.id]


async def test_a_run_waiting_for_its_scope_does_not_block_its_lane(wired: Wired) -> None:
    await wired.runs(2, "s", execution_scope="repo-x")
    (plain,) = await wired.runs(1, "plain")
    await observe(wired.cap.reports, OWNER, "i1", 10)
    assert len((await claim(wired.cap, OWNER, "i1")).claimed) == 1  # s0 holds repo-x
    outcome = await claim(wired.cap, OWNER, "i1", max_claims=1)
    assert [item.run.id for item in outcome.claimed] == [plain.id]


@pytest.mark.parametrize("urgent", [{"priority": 10}, {"run_now": True}], ids=["priority", "now"])
async def test_order_inside_one_agent_puts_urgent_runs_first(
    wired: Wired, urgent: dict[str, Any]
) -> None:
    await wired.runs(1, "old", agent_id="A")  # A is not configured: R = 1
    (hot,) = await wired.runs(1, "hot", agent_id="A", **urgent)
    await observe(wired.cap.reports, OWNER, "i1", 10)
    outcome = await claim(wired.cap, OWNER, "i1", max_claims=2)  # max_claims=1 hides it
    assert [item.run.id for item in outcome.claimed] == [hot.id]


# --- the claim transaction -----------------------------------------------------------------


class FailingTx:
    """A claim transaction whose ``fail_at``-th apply raises CasMiss (0: never); everything
    else goes to the real transaction."""

    def __init__(self, inner: RunTx, fail_at: int) -> None:
        self._inner = inner
        self._fail_at = fail_at
        self.applies = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def apply(self, decision: Decision, dedupe_key: str | None = None) -> Applied:
        self.applies += 1
        if self.applies == self._fail_at:
            raise CasMiss("injected: the candidate changed under the batch")
        return await self._inner.apply(decision, dedupe_key)

    async def apply_many(self, decisions: Sequence[Decision]) -> list[Applied]:
        """The claim round's one write, decision by decision on the real transaction, so the
        injected miss comes after the first CAS was written (the PostgreSQL statement's own
        all-or-nothing: test_transitions.py, test_a_batch_of_writes_is_all_or_nothing)."""
        return [await self.apply(decision) for decision in decisions]


class FailingStore:
    """The real store; its first ``failing`` transactions fail at their second apply."""

    def __init__(self, inner: RunStore, failing: int) -> None:
        self._inner = inner
        self.failing = failing
        self.transactions: list[FailingTx] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def transaction(self, lock_keys: Sequence[str]) -> AbstractAsyncContextManager[RunTx]:
        @asynccontextmanager
        async def wrapped() -> AsyncIterator[RunTx]:
            async with self._inner.transaction(lock_keys) as tx:
                fail_at = 2 if len(self.transactions) < self.failing else 0
                self.transactions.append(FailingTx(tx, fail_at))
                yield cast(RunTx, self.transactions[-1])

        return wrapped()


def failing_claims(w: Wired, failing: int) -> tuple[ClaimService, FailingStore]:
    store = FailingStore(w.app.store, failing)
    sql = capacity_sql(w.app.store)
    door = Transitions(cast(RunStore, store))  # the claim's transactions open on the wrapper
    return ClaimService(sql, w.cap.observations, door), store


async def test_batch_claim_is_all_or_nothing(wired: Wired) -> None:
    await wired.runs(3)
    await observe(wired.cap.reports, OWNER, "i1", 5)
    claims, store = failing_claims(wired, failing=1_000)  # every batch misses its 2nd CAS

    before = await snapshot(wired.url)
    outcome = await claims.claim(OWNER, "i1", "dev-1", 3, LEASE_TTL_MS, SCHEDULER)
    assert outcome.claimed == ()
    assert outcome.blocked is Blocked.NOTHING_ELIGIBLE
    assert len(store.transactions) >= 1
    assert all(tx.applies == 2 for tx in store.transactions)  # the 1st CAS had been written
    assert await snapshot(wired.url) == before  # ... and was rolled back with the batch

    # One failed batch, then the service plans again: each run claimed once, nothing left over.
    claims, store = failing_claims(wired, failing=1)
    outcome = await claims.claim(OWNER, "i1", "dev-1", 3, LEASE_TTL_MS, SCHEDULER)
    assert len(outcome.claimed) == 3 and len(store.transactions) == 2
    events = await rows(
        wired.url, "SELECT attempt_id FROM run_events WHERE type = 'attempt.claimed'"
    )
    assert sorted(e["attempt_id"] for e in events) == sorted(i.attempt.id for i in outcome.claimed)


async def test_claim_writes_runtime_instance_on_each_attempt(wired: Wired) -> None:
    await wired.runs(5)
    await observe(wired.cap.reports, OWNER, "i1", 3, routes=("dev-1", "dev-2"))
    outcome = await claim(wired.cap, OWNER, "i1", "dev-2", max_claims=5)
    assert len(outcome.claimed) == 3
    by_id = {row["id"]: row for row in await rows(wired.url, "SELECT * FROM attempts")}
    for item in outcome.claimed:
        row = by_id.pop(item.attempt.id)
        assert (row["status"], row["runtime_instance_id"], row["runtime_device_id"]) == (
            "claimed",
            "i1",
            "dev-2",
        )
        assert row["owner_id"] == OWNER and row["lease_token"] == item.attempt.lease_token
    assert {(r["status"], r["runtime_instance_id"]) for r in by_id.values()} == {("queued", None)}


# --- over gRPC -----------------------------------------------------------------------------

CLAIM_METHOD = "/truerun.v1.CapacityService/Claim"


@dataclass
class CapacityApi:
    writer: capacity_service_pb2_grpc.CapacityServiceAsyncStub  # the service identity
    reader: capacity_service_pb2_grpc.CapacityServiceAsyncStub  # an operator of every project
    channel: grpc.aio.Channel  # the writer's, for raw calls


@asynccontextmanager
async def capacity_api(w: Wired) -> AsyncIterator[CapacityApi]:
    server, port = await create_server(w.app, "127.0.0.1:0", w.cap, tokens=server_tokens())
    try:
        # reports and claims come from truerun's service identity, reads from a person with
        # an API token (docs/tenancy.md)
        async with (
            aio_channel(f"127.0.0.1:{port}", SERVICE_TOKEN) as service,
            aio_channel(f"127.0.0.1:{port}") as operator,
        ):
            yield CapacityApi(
                capacity_service_pb2_grpc.CapacityServiceStub(service),
                capacity_service_pb2_grpc.CapacityServiceStub(operator),
                service,
            )
    finally:
        await server.stop(None)


def grpc_observation(limit: int, active: int, active_task_ids: Sequence[str]) -> pb.Observation:
    return pb.Observation(
        owner_id=OWNER,
        runtime_instance_id="i1",
        routes=[pb.Route(device_id="dev-1", kind="local")],
        limit=limit,
        active=active,
        active_task_ids=list(active_task_ids),
    )


async def raw_claim(channel: grpc.aio.Channel, request: pb.ClaimRequest) -> bytes:
    call = channel.unary_unary(
        CLAIM_METHOD,
        request_serializer=pb.ClaimRequest.SerializeToString,
        response_deserializer=None,
    )
    response = await call(request)
    assert isinstance(response, bytes)
    return response


def test_claim_request_has_no_capacity_field() -> None:
    names = [field.name for field in pb.ClaimRequest.DESCRIPTOR.fields]
    assert names  # the descriptor is there
    for word in ("limit", "capacity", "concurrency", "slot", "occup", "active", "free"):
        assert not [name for name in names if word in name], names


async def test_capacity_service_over_grpc(wired: Wired) -> None:
    await wired.runs(4)
    async with capacity_api(wired) as api:
        stub, reader, channel = api.writer, api.reader, api.channel
        before = await snapshot(wired.url)
        for active, ids in ((2, ["t-1"]), (1, ["t-1", "t-2"]), (2, ["t-1", "t-1"]), (1, [""])):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ReportObservation(
                    pb.ReportObservationRequest(observation=grpc_observation(4, active, ids))
                )
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert reason_of(caught.value) == "OBSERVATION_REJECTED"
        assert await wired.cap.observations.get(OWNER, "i1", now_ms()) is None  # nothing stored
        occ = await reader.GetOccupancy(
            pb.GetOccupancyRequest(owner_id=OWNER, runtime_instance_id="i1")
        )
        assert not occ.observation_fresh and occ.free_slots == 0 and occ.limit == 0
        assert await snapshot(wired.url) == before

        stored = await stub.ReportObservation(
            pb.ReportObservationRequest(observation=grpc_observation(4, 1, ["manual-1"]))
        )
        assert stored.ttl_ms == LONG_TTL_MS

        request = pb.ClaimRequest(
            request_id=str(uuid.uuid4()),
            owner_id=OWNER,
            runtime_instance_id="i1",
            device_id="dev-1",
            max_attempts=2,
            served_project_ids=["*"],
        )
        first = await raw_claim(channel, request)
        after_first = await snapshot(wired.url)
        assert await raw_claim(channel, request) == first  # the same bytes, nothing written
        assert await snapshot(wired.url) == after_first
        answer = pb.ClaimResponse.FromString(first)
        assert len(answer.claimed) == 2
        assert answer.blocked_reason == pb.CLAIM_BLOCK_REASON_UNSPECIFIED

        more = await stub.Claim(
            pb.ClaimRequest(
                owner_id=OWNER,
                runtime_instance_id="i1",
                device_id="dev-1",
                max_attempts=5,
                served_project_ids=["*"],
            )
        )
        assert len(more.claimed) == 1 and more.blocked_reason == pb.CLAIM_BLOCK_REASON_DEVICE_FULL
        assert await raw_claim(channel, request) == first  # still the first answer

        occ = await reader.GetOccupancy(
            pb.GetOccupancyRequest(owner_id=OWNER, runtime_instance_id="i1")
        )
        claimed_ids = {a.runtime_task_id for a in [*answer.claimed, *more.claimed]}
        assert (occ.limit, occ.occupied, occ.runtime_active, occ.durable_rows) == (4, 4, 1, 3)
        assert occ.free_slots == 0 and occ.observation_fresh
        assert set(occ.merged_task_ids) == {"manual-1", *claimed_ids}
        assert set(occ.durable_only_task_ids) == claimed_ids
