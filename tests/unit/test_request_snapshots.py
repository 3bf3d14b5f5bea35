"""AIP-155 records keep a snapshot of what was committed (coordinator/store/snapshots.py);
the answer is rendered from it after the commit, the same bytes every time."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from typing import cast

import pytest
from truerun.v1 import common_pb2, run_service_pb2

from capacity.service.claims import (
    Blocked,
    Claimed,
    ClaimOutcome,
    outcome_from_snapshot,
    outcome_snapshot,
)
from coordinator.api.request_ids import once
from coordinator.domain import commands as c
from coordinator.domain.decide import Context, decide
from coordinator.domain.model import Actor, Attempt, Run
from coordinator.domain.states import ActorType
from coordinator.store.base import Loaded, RequestRecord, RunReader, StoredRequest
from coordinator.store.snapshots import (
    Snapshot,
    decode,
    encode,
    run_from_snapshot,
    run_snapshot,
)
from kernel.errors import RequestIdReused

ACTOR = Actor(ActorType.USER, "alice")


def claimed_run() -> tuple[Run, Attempt]:
    ids = (f"id-{n:04d}" for n in itertools.count())
    ctx = Context(now_ms=1_700_000_000_000, new_id=lambda: next(ids), new_token=lambda: "tok")
    spec = c.RunSpec(
        "proj",
        "owner",
        "task",
        ACTOR,
        required_labels=("gpu", "x86"),
        spec={"b": [1, "two", {"z": None}], "a": {"k": 2.5}},
    )
    created = decide(c.CreateRun(spec), None, None, ctx)
    claim = c.Claim(created.run.id, ACTOR, runtime_instance_id="i1", runtime_device_id="d1")
    decision = decide(claim, created.run, created.attempt, ctx)
    assert decision.attempt is not None
    return decision.run, decision.attempt


def test_a_run_snapshot_reads_back_as_committed() -> None:
    run, attempt = claimed_run()
    for committed in (Loaded(run, attempt), Loaded(run, None)):
        snapshot = run_snapshot(committed.run, committed.attempt)
        stored = encode(snapshot)
        assert stored == encode(decode(stored) or {})  # deterministic bytes
        assert run_from_snapshot(decode(stored) or {}) == committed


def test_a_claim_snapshot_reads_back_as_committed() -> None:
    run, attempt = claimed_run()
    for outcome in (
        ClaimOutcome((Claimed(run, attempt, "/w/x"),), Blocked.AGENT_LIMIT, "R reached"),
        ClaimOutcome((), Blocked.DEVICE_FULL, "O=4 of D=4"),
    ):
        assert outcome_from_snapshot(decode(encode(outcome_snapshot(outcome))) or {}) == outcome


def test_a_record_from_before_snapshots_is_its_answers_bytes() -> None:
    assert decode(common_pb2.Run(id="r").SerializeToString()) is None
    assert decode(b"") is None


class Reader:
    """The one read ``once`` makes (RunReader.get_request)."""

    def __init__(self, stored: StoredRequest | None) -> None:
        self.stored = stored

    async def get_request(self, request_id: str) -> StoredRequest | None:
        return self.stored


REQUEST = run_service_pb2.RetryRunRequest(id="run-1", request_id="rid-1")
DIGEST = hashlib.sha256(
    b"RetryRun\0" + run_service_pb2.RetryRunRequest(id="run-1").SerializeToString()
).hexdigest()


def answer(reader: Reader, executed: list[RequestRecord | None]) -> bytes:
    async def execute(record: RequestRecord | None) -> common_pb2.Run:
        executed.append(record)
        return common_pb2.Run(id="executed")

    def render(snapshot: Snapshot) -> common_pb2.Run:
        return common_pb2.Run(id=str(snapshot["id"]))

    reader_as_store = cast(RunReader, reader)
    reply = asyncio.run(once(reader_as_store, "RetryRun", REQUEST, common_pb2.Run, execute, render))
    return reply.SerializeToString(deterministic=True)


def run_bytes(run_id: str) -> bytes:
    return common_pb2.Run(id=run_id).SerializeToString(deterministic=True)


def test_once_answers_from_the_stored_record() -> None:
    executed: list[RequestRecord | None] = []
    snapshot = Reader(StoredRequest("RetryRun", DIGEST, encode({"id": "from-snapshot"})))
    assert answer(snapshot, executed) == run_bytes("from-snapshot")
    legacy = Reader(StoredRequest("RetryRun", DIGEST, run_bytes("old")))
    assert answer(legacy, executed) == run_bytes("old")
    assert executed == []
    for other in (StoredRequest("RetryRun", "x" * 64, b"{}"), StoredRequest("M", DIGEST, b"{}")):
        with pytest.raises(RequestIdReused):
            answer(Reader(other), executed)
    # Nothing kept (the change was a no-op): the response as executed, given the record.
    assert answer(Reader(None), executed) == run_bytes("executed")
    assert executed == [RequestRecord("rid-1", "RetryRun", DIGEST)]
