"""RunService over real gRPC, on SQLite and PostgreSQL.

Every test talks to a real server (tests/support/grpc_server.py) on 127.0.0.1:0 over the real
store, and checks what was written by reading the database directly (sqlite3 on the file,
asyncpg for PostgreSQL), never through the store under test. No sleeps: waits are bounded
``asyncio.wait_for`` on something that must happen.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sqlite3
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from truerun.v1 import common_pb2, run_service_pb2

from coordinator.api.errors import reason_of
from coordinator.domain.cursor import EventCursor
from coordinator.domain.decide import Decision
from coordinator.domain.model import Attempt, Run, RunEvent
from coordinator.domain.output import Stored
from coordinator.store.base import (
    Applied,
    Loaded,
    RequestRecord,
    RunCursor,
    RunFilter,
    RunStore,
    RunTx,
    StoredRequest,
)
from tests.support.auth import aio_channel
from tests.support.grpc_server import GrpcApi, grpc_run_service

M = TypeVar("M", bound=Message)

REPO = str(Path(__file__).resolve().parents[2])
WAIT = 10.0  # seconds; an upper bound for things that must happen, never a sleep
SERVICE = "truerun.v1.RunService"

INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT

# Every table of the database, with the column that orders it.
TABLES = {
    "alembic_version": "version_num",
    "attempts": "id",
    "request_log": "request_id",
    "run_events": "id",
    "runs": "id",
}

RS = common_pb2.RunStatus
DS = common_pb2.DisplayState


# -- reading the database directly ----------------------------------------------------------


async def snapshot(database_url: str) -> str:
    """Every row of every table, in key order, as one exact text.

    On PostgreSQL each row carries its ``xmin``: even an UPDATE that rewrites a row with the
    same values changes it, so "unchanged" means not written at all.
    """
    tables: dict[str, list[tuple[Any, ...]]] = {}
    if database_url.startswith("sqlite:///"):
        path = database_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            for table, key in TABLES.items():
                tables[table] = [
                    tuple(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY {key}")
                ]
    else:
        conn = await asyncpg.connect(database_url)
        try:
            for table, key in TABLES.items():
                rows = await conn.fetch(
                    f"SELECT xmin::text AS row_xmin, * FROM {table} ORDER BY {key}"
                )
                tables[table] = [tuple(row.values()) for row in rows]
        finally:
            await conn.close()
    return repr(tables)


async def row_counts(database_url: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    if database_url.startswith("sqlite:///"):
        path = database_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            for table in TABLES:
                counts[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    else:
        conn = await asyncpg.connect(database_url)
        try:
            for table in TABLES:
                counts[table] = await conn.fetchval(f"SELECT count(*) FROM {table}")
        finally:
            await conn.close()
    return counts


@contextlib.contextmanager
def sqlite_commits(database_url: str) -> Iterator[Callable[[], bool]]:
    """On SQLite: a probe that says whether any connection committed since the block began
    (``PRAGMA data_version``). On PostgreSQL the probe is always False (xmin covers it)."""
    if not database_url.startswith("sqlite:///"):
        yield lambda: False
        return
    with contextlib.closing(sqlite3.connect(database_url.removeprefix("sqlite:///"))) as conn:
        start = conn.execute("PRAGMA data_version").fetchone()[0]
        yield lambda: bool(conn.execute("PRAGMA data_version").fetchone()[0] != start)


# -- errors ---------------------------------------------------------------------------------


def status_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo:
    """The one ErrorInfo of ``status``, its first detail; a refusal past a bound has a
    RetryInfo beside it, and nothing else may be there."""
    assert 1 <= len(status.details) <= 2, f"expected an ErrorInfo (and a RetryInfo): {status}"
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info), f"the detail is not an ErrorInfo: {status.details[0]}"
    for extra in status.details[1:]:
        assert extra.Unpack(error_details_pb2.RetryInfo()), f"not a RetryInfo: {extra}"
    return info


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    """The one ErrorInfo of the google.rpc.Status in the ``grpc-status-details-bin`` trailer."""
    metadata: Any = error.trailing_metadata() or ()
    trailers = [value for key, value in metadata if key == "grpc-status-details-bin"]
    assert len(trailers) == 1, f"expected one status trailer, got {error.trailing_metadata()}"
    assert isinstance(trailers[0], bytes)
    status = status_pb2.Status.FromString(trailers[0])
    assert status.code == error.code().value[0]
    assert status.message == error.details()
    info = status_info(status)
    assert info.domain == "truerun"
    assert reason_of(error) == info.reason
    return info


async def expect_error(
    call: Awaitable[Any], code: grpc.StatusCode, reason: str
) -> error_details_pb2.ErrorInfo:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    error = caught.value
    assert error.code() == code, f"{error.code()} {error.details()}"
    info = error_info(error)
    assert info.reason == reason, error.details()
    return info


async def drain(call: grpc.aio.UnaryStreamCall[Any, Any]) -> None:
    async for _ in call:
        pass


# -- building runs --------------------------------------------------------------------------


def create_request(**fields: Any) -> run_service_pb2.CreateRunRequest:
    values: dict[str, Any] = {"project_id": "proj-a", "owner_id": "owner-a", "task_id": "task-1"}
    values.update(fields)
    return run_service_pb2.CreateRunRequest(**values)


async def create(api: GrpcApi, **fields: Any) -> common_pb2.Run:
    response = await api.stub.CreateRun(create_request(**fields))
    assert not response.existing
    return response.run


async def cancel(api: GrpcApi, run_id: str) -> common_pb2.Run:
    response = await api.stub.CancelRun(run_service_pb2.CancelRunRequest(id=run_id))
    assert response.outcome == run_service_pb2.CANCEL_OUTCOME_CANCELLED
    return response.run


async def all_events(api: GrpcApi, run_id: str, page_size: int = 0) -> list[common_pb2.RunEvent]:
    events: list[common_pb2.RunEvent] = []
    token = ""
    while True:
        page = await api.stub.ListRunEvents(
            run_service_pb2.ListRunEventsRequest(
                run_id=run_id, page_size=page_size, page_token=token
            )
        )
        events.extend(page.events)
        token = page.next_page_token
        if not token:
            return events


async def all_runs(
    api: GrpcApi, page_size: int = 0, **filters: Any
) -> tuple[list[common_pb2.Run], int]:
    """Every run matching ``filters`` and the number of pages it took."""
    runs: list[common_pb2.Run] = []
    token = ""
    pages = 0
    while True:
        page = await api.stub.ListRuns(
            run_service_pb2.ListRunsRequest(page_size=page_size, page_token=token, **filters)
        )
        pages += 1
        runs.extend(page.runs)
        token = page.next_page_token
        if not token:
            return runs, pages
        assert pages < 100, "paging does not end"


async def watch_until(
    call: grpc.aio.UnaryStreamCall[Any, common_pb2.RunEvent], sequence: int
) -> list[common_pb2.RunEvent]:
    """Read the stream until the event with ``sequence`` arrived (bounded wait per event)."""
    events: list[common_pb2.RunEvent] = []
    while not events or events[-1].sequence < sequence:
        event = await asyncio.wait_for(call.read(), WAIT)
        assert isinstance(event, common_pb2.RunEvent), f"the watch ended: {event!r}"
        events.append(event)
    return events


@contextlib.asynccontextmanager
async def raw_channel(api: GrpcApi) -> AsyncIterator[grpc.aio.Channel]:
    async with aio_channel(api.address) as channel:
        yield channel


async def raw_call(channel: grpc.aio.Channel, method: str, request: Message) -> bytes:
    """Call ``method`` and return the response exactly as it came over the wire."""
    call = channel.unary_unary(
        f"/{SERVICE}/{method}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=None,
    )
    response = await call(request)
    assert isinstance(response, bytes)
    return response


def etag(version: int) -> str:
    return f'"{version}"'


def big_spec(size: int) -> struct_pb2.Struct:
    """About ``size`` bytes of spec, in strings of 8 KiB (each under TRUERUN_INPUT_MAX_STRING)."""
    spec = struct_pb2.Struct()
    spec.update({f"blob{i}": "x" * min(8192, size - i) for i in range(0, size, 8192)})
    return spec


# -- 1. invalid arguments -------------------------------------------------------------------


async def test_invalid_arguments_are_rich_errors_and_write_nothing(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    stub = grpc_api.stub
    queued = await create(grpc_api)
    pending = await create(grpc_api, requires_approval=True)
    other_events = await all_events(grpc_api, pending.id)
    assert other_events
    events_token = (
        await stub.ListRunEvents(
            run_service_pb2.ListRunEventsRequest(run_id=queued.id, page_size=1)
        )
    ).next_page_token
    assert events_token
    forged_list_token = base64.urlsafe_b64encode(json.dumps(["x"]).encode()).decode()
    before = await snapshot(migrated_database_url)

    R = run_service_pb2
    cases: dict[str, Callable[[], Awaitable[Any]]] = {
        "GetRun id not a uuid": lambda: stub.GetRun(R.GetRunRequest(id="not-a-uuid")),
        "GetRun id empty": lambda: stub.GetRun(R.GetRunRequest(id="")),
        "GetRun id braced uuid": lambda: stub.GetRun(R.GetRunRequest(id="{" + queued.id + "}")),
        "GetRun id 200 chars": lambda: stub.GetRun(R.GetRunRequest(id="a" * 200)),
        "CancelRun id": lambda: stub.CancelRun(R.CancelRunRequest(id="nope")),
        "ApproveRun id": lambda: stub.ApproveRun(R.ApproveRunRequest(id="nope")),
        "RetryRun id": lambda: stub.RetryRun(R.RetryRunRequest(id="nope")),
        "ListRunEvents run_id": lambda: stub.ListRunEvents(R.ListRunEventsRequest(run_id="x")),
        "WatchRunEvents run_id": lambda: drain(
            stub.WatchRunEvents(R.WatchRunEventsRequest(run_id="x"))
        ),
        "WatchRunEvents neither run nor project": lambda: drain(
            stub.WatchRunEvents(R.WatchRunEventsRequest())
        ),
        "WatchRunEvents negative after_sequence": lambda: drain(
            stub.WatchRunEvents(R.WatchRunEventsRequest(run_id=queued.id, after_sequence=-1))
        ),
        "CreateRun project_id 200 chars": lambda: stub.CreateRun(
            create_request(project_id="p" * 200)
        ),
        "CreateRun owner_id missing": lambda: stub.CreateRun(create_request(owner_id="")),
        "CreateRun task_id bad characters": lambda: stub.CreateRun(
            create_request(task_id="task 1; drop table runs")
        ),
        "CreateRun spec > 64 KiB": lambda: stub.CreateRun(create_request(spec=big_spec(70_000))),
        "CreateRun spec > 64 KiB with request_id": lambda: stub.CreateRun(
            create_request(spec=big_spec(70_000), request_id=str(uuid.uuid4()))
        ),
        "CreateRun scope_policy=99": lambda: stub.CreateRun(create_request(scope_policy=99)),
        "CreateRun conflict_policy=99": lambda: stub.CreateRun(
            create_request(conflict_policy=99, idempotency_key="k")
        ),
        "CreateRun max_attempts=101": lambda: stub.CreateRun(create_request(max_attempts=101)),
        "CreateRun request_id 129 chars": lambda: stub.CreateRun(
            create_request(request_id="r" * 129)
        ),
        "CancelRun reason 513 chars": lambda: stub.CancelRun(
            R.CancelRunRequest(id=queued.id, reason="r" * 513)
        ),
        "CancelRun reason 513 chars with request_id": lambda: stub.CancelRun(
            R.CancelRunRequest(id=queued.id, reason="r" * 513, request_id=str(uuid.uuid4()))
        ),
        "CancelRun garbage etag": lambda: stub.CancelRun(
            R.CancelRunRequest(id=queued.id, etag="garbage")
        ),
        "ApproveRun garbage etag": lambda: stub.ApproveRun(
            R.ApproveRunRequest(id=pending.id, etag="W/xyz")
        ),
        "ListRuns statuses=[99]": lambda: stub.ListRuns(
            R.ListRunsRequest(statuses=[99])  # type: ignore[list-item]
        ),
        "ListRuns display_states=[99]": lambda: stub.ListRuns(
            R.ListRunsRequest(display_states=[99])  # type: ignore[list-item]
        ),
        "ListRuns page_size=-1": lambda: stub.ListRuns(R.ListRunsRequest(page_size=-1)),
        "ListRuns owner_id 200 chars": lambda: stub.ListRuns(R.ListRunsRequest(owner_id="o" * 200)),
        "ListRuns garbage page_token": lambda: stub.ListRuns(
            R.ListRunsRequest(page_token="garbage!!")
        ),
        "ListRuns page_token of ListRunEvents": lambda: stub.ListRuns(
            R.ListRunsRequest(page_token=events_token)
        ),
        "ListRuns page_token not an object": lambda: stub.ListRuns(
            R.ListRunsRequest(page_token=forged_list_token)
        ),
        "ListRunEvents page_size=-1": lambda: stub.ListRunEvents(
            R.ListRunEventsRequest(run_id=queued.id, page_size=-1)
        ),
        "ListRunEvents garbage page_token": lambda: stub.ListRunEvents(
            R.ListRunEventsRequest(run_id=queued.id, page_token="%%garbage%%")
        ),
        "ListRunEvents page_token of another run": lambda: stub.ListRunEvents(
            R.ListRunEventsRequest(run_id=pending.id, page_token=events_token)
        ),
        "ListRunEvents negative after_sequence": lambda: stub.ListRunEvents(
            R.ListRunEventsRequest(run_id=queued.id, after_sequence=-5)
        ),
    }
    for name, make_call in cases.items():
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await make_call()
        error = caught.value
        assert error.code() == INVALID_ARGUMENT, f"{name}: {error.code()} {error.details()}"
        info = error_info(error)
        # a spec past TRUERUN_INPUT_MAX_BYTES names its bound (docs/operations.md, Input bounds)
        reason = "INPUT_TOO_LARGE" if "> 64 KiB" in name else "INVALID_ARGUMENT"
        assert info.reason == reason, f"{name}: {info}"
        assert await snapshot(migrated_database_url) == before, f"{name} wrote something"

    # The valid twins of the boundary cases do go through.
    await create(grpc_api, project_id="p" * 128, spec=big_spec(60_000))
    assert (await stub.GetRun(run_service_pb2.GetRunRequest(id=queued.id.upper()))).id == queued.id


# -- 2. not found, stale etags, invalid transitions ------------------------------------------


async def test_not_found_conflict_and_invalid_transition(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    stub = grpc_api.stub
    queued = await create(grpc_api)
    pending = await create(grpc_api, requires_approval=True)
    missing = str(uuid.uuid4())
    before = await snapshot(migrated_database_url)

    R = run_service_pb2
    nf = grpc.StatusCode.NOT_FOUND
    not_found: dict[str, Callable[[], Awaitable[Any]]] = {
        "GetRun": lambda: stub.GetRun(R.GetRunRequest(id=missing)),
        "CancelRun": lambda: stub.CancelRun(R.CancelRunRequest(id=missing)),
        "ApproveRun": lambda: stub.ApproveRun(R.ApproveRunRequest(id=missing)),
        "RetryRun": lambda: stub.RetryRun(R.RetryRunRequest(id=missing)),
        "ListRunEvents": lambda: stub.ListRunEvents(R.ListRunEventsRequest(run_id=missing)),
        "WatchRunEvents": lambda: drain(
            stub.WatchRunEvents(R.WatchRunEventsRequest(run_id=missing))
        ),
        "CancelRun with request_id": lambda: stub.CancelRun(
            R.CancelRunRequest(id=missing, request_id=str(uuid.uuid4()))
        ),
    }
    for name, make_call in not_found.items():
        info = await expect_error(make_call(), nf, "RUN_NOT_FOUND")
        assert info.metadata["run_id"] == missing, name

    assert pending.version >= 1
    for stale in (etag(pending.version + 1), etag(pending.version - 1), f"W/{etag(99)}"):
        await expect_error(
            stub.ApproveRun(R.ApproveRunRequest(id=pending.id, etag=stale)),
            grpc.StatusCode.ABORTED,
            "RUN_VERSION_CONFLICT",
        )
        info = await expect_error(
            stub.CancelRun(R.CancelRunRequest(id=queued.id, etag=stale)),
            grpc.StatusCode.ABORTED,
            "RUN_VERSION_CONFLICT",
        )
        assert info.metadata["run_id"] == queued.id

    info = await expect_error(
        stub.ApproveRun(R.ApproveRunRequest(id=queued.id)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "INVALID_RUN_TRANSITION",
    )
    assert info.metadata["run_status"] == "queued"
    await expect_error(
        stub.RetryRun(R.RetryRunRequest(id=queued.id)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "INVALID_RUN_TRANSITION",
    )
    assert await snapshot(migrated_database_url) == before

    # The current etag passes the check.
    approved = await stub.ApproveRun(R.ApproveRunRequest(id=pending.id, etag=pending.etag))
    assert approved.status == RS.RUN_STATUS_QUEUED
    assert approved.version == pending.version + 1
    # ... and is stale right after.
    await expect_error(
        stub.CancelRun(R.CancelRunRequest(id=pending.id, etag=pending.etag)),
        grpc.StatusCode.ABORTED,
        "RUN_VERSION_CONFLICT",
    )
    cancelled = await stub.CancelRun(R.CancelRunRequest(id=pending.id, etag=approved.etag))
    assert cancelled.outcome == R.CANCEL_OUTCOME_CANCELLED


# -- 3. AIP-155 request ids -----------------------------------------------------------------


async def test_create_run_request_id_replays_the_first_answer(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    request_id = str(uuid.uuid4())
    # Map order is the subject of the next tests; here one key per map keeps it out.
    spec = struct_pb2.Struct()
    spec.update({"a": [1, "two", {"z": None}, {"y": {"k": 2.5}}]})
    request = create_request(request_id=request_id, spec=spec, required_labels=["gpu", "x86"])
    async with raw_channel(grpc_api) as channel:
        first = await raw_call(channel, "CreateRun", request)
        after_first = await snapshot(migrated_database_url)
        second = await raw_call(channel, "CreateRun", request)
        assert second == first
        assert await snapshot(migrated_database_url) == after_first

    counts = await row_counts(migrated_database_url)
    run = run_service_pb2.CreateRunResponse.FromString(first).run
    assert counts["runs"] == 1
    assert counts["request_log"] == 1
    assert counts["run_events"] == run.event_sequence == len(await all_events(grpc_api, run.id))

    # The same request_id for another create is refused as a reused idempotency key is,
    # naming the first run (issue #36); for another method it is REQUEST_ID_REUSED.
    info = await expect_error(
        grpc_api.stub.CreateRun(
            create_request(request_id=request_id, spec=spec, required_labels=["gpu"])
        ),
        grpc.StatusCode.ALREADY_EXISTS,
        "IDEMPOTENCY_KEY_REUSED",
    )
    assert info.metadata["request_id"] == request_id
    assert info.metadata["run_id"] == run.id
    assert await snapshot(migrated_database_url) == after_first
    info = await expect_error(
        grpc_api.stub.CancelRun(run_service_pb2.CancelRunRequest(id=run.id, request_id=request_id)),
        INVALID_ARGUMENT,
        "REQUEST_ID_REUSED",
    )
    assert info.metadata["request_id"] == request_id
    assert await snapshot(migrated_database_url) == after_first


async def test_cancel_and_approve_request_ids_replay_the_first_answer(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    R = run_service_pb2
    queued = await create(grpc_api)
    pending = await create(grpc_api, requires_approval=True)
    cancel_id, approve_id, retry_id = (str(uuid.uuid4()) for _ in range(3))
    cancel_request = R.CancelRunRequest(
        id=queued.id,
        request_id=cancel_id,
        reason="not needed",
        actor=common_pb2.Actor(type=common_pb2.ACTOR_TYPE_USER, id="alice"),
    )
    approve_request = R.ApproveRunRequest(id=pending.id, request_id=approve_id, etag=pending.etag)
    retry_request = R.RetryRunRequest(id=queued.id, request_id=retry_id)

    async with raw_channel(grpc_api) as channel:
        for method, request in (
            ("CancelRun", cancel_request),
            ("ApproveRun", approve_request),
            ("RetryRun", retry_request),
        ):
            before = await row_counts(migrated_database_url)
            first = await raw_call(channel, method, request)
            after_first = await snapshot(migrated_database_url)
            counts = await row_counts(migrated_database_url)
            assert counts["request_log"] == before["request_log"] + 1, method
            assert counts["run_events"] > before["run_events"], method
            for _ in range(2):
                assert await raw_call(channel, method, request) == first, method
            assert await snapshot(migrated_database_url) == after_first, method

    got = await grpc_api.stub.GetRun(R.GetRunRequest(id=queued.id))
    assert got.status == RS.RUN_STATUS_CANCELLED
    assert got.cancel_reason == "not needed"
    retried, _ = await all_runs(grpc_api, project_id="proj-a")
    assert sum(1 for r in retried if r.retry_of_run_id == queued.id) == 1

    settled = await snapshot(migrated_database_url)
    stub = grpc_api.stub
    user = common_pb2.ACTOR_TYPE_USER
    changed: dict[str, Callable[[], Awaitable[Any]]] = {
        "cancel: other reason": lambda: stub.CancelRun(
            R.CancelRunRequest(id=queued.id, request_id=cancel_id, reason="other")
        ),
        "cancel: other actor": lambda: stub.CancelRun(
            R.CancelRunRequest(
                id=queued.id,
                request_id=cancel_id,
                reason="not needed",
                actor=common_pb2.Actor(type=user, id="bob"),
            )
        ),
        "approve: other etag": lambda: stub.ApproveRun(
            R.ApproveRunRequest(id=pending.id, request_id=approve_id)
        ),
        "approve: other run": lambda: stub.ApproveRun(
            R.ApproveRunRequest(id=queued.id, request_id=approve_id, etag=pending.etag)
        ),
        "approve with the cancel's request_id": lambda: stub.ApproveRun(
            R.ApproveRunRequest(id=queued.id, request_id=cancel_id)
        ),
        "retry: other actor": lambda: stub.RetryRun(
            R.RetryRunRequest(
                id=queued.id, request_id=retry_id, actor=common_pb2.Actor(type=user, id="x")
            )
        ),
    }
    for name, make_call in changed.items():
        await expect_error(make_call(), INVALID_ARGUMENT, "REQUEST_ID_REUSED")
        assert await snapshot(migrated_database_url) == settled, name


def many_key_spec() -> struct_pb2.Struct:
    """A spec whose Struct map has enough keys that no two map orders agree by chance."""
    spec = struct_pb2.Struct()
    spec.update({f"key{i:03d}": {"n": i, "s": str(i)} for i in range(128)})
    return spec


async def test_create_run_replay_is_byte_identical_with_a_many_key_spec(
    grpc_api: GrpcApi,
) -> None:
    request = create_request(request_id=str(uuid.uuid4()), spec=many_key_spec())
    async with raw_channel(grpc_api) as channel:
        first = await raw_call(channel, "CreateRun", request)
        for _ in range(3):
            assert await raw_call(channel, "CreateRun", request) == first


CHILD_SERVER = """
import asyncio, sys
from tests.support.grpc_server import grpc_run_service

async def main():
    async with grpc_run_service(sys.argv[1], migrate=False) as api:
        print(api.address, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""

MAP_ORDER_PROBE = """
import sys
from google.protobuf import struct_pb2
data = bytes.fromhex(sys.stdin.read())
sys.stdout.write(struct_pb2.Struct.FromString(data).SerializeToString().hex())
"""


async def python(code: str, *args: str, stdin: bytes | None = None) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        *args,
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(stdin), WAIT)
    assert proc.returncode == 0
    return out


@contextlib.asynccontextmanager
async def server_in_another_process(database_url: str) -> AsyncIterator[str]:
    """A second coordinator process (another replica, or this one after a restart) serving
    the same database; yields its address."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD_SERVER,
        database_url,
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
        assert line, "the server process did not start"
        yield line.decode().strip()
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), WAIT)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_create_run_replay_from_another_process_is_byte_identical(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    spec = many_key_spec()
    # Whether this machine can show it at all: does a re-parsed map come out of another
    # process in another order?
    canonical = spec.SerializeToString(deterministic=True)
    here = struct_pb2.Struct.FromString(canonical).SerializeToString()
    there = await python(MAP_ORDER_PROBE, stdin=canonical.hex().encode())
    if bytes.fromhex(there.decode()) == here:
        pytest.skip("protobuf writes maps in one order in every process here (ASLR off?)")

    request = create_request(request_id=str(uuid.uuid4()), spec=spec)
    async with raw_channel(grpc_api) as channel:
        first = await raw_call(channel, "CreateRun", request)
    after_first = await snapshot(migrated_database_url)
    async with (
        server_in_another_process(migrated_database_url) as address,
        aio_channel(address) as other,
    ):
        replay = await raw_call(other, "CreateRun", request)
    assert await snapshot(migrated_database_url) == after_first  # written once
    R = run_service_pb2.CreateRunResponse
    assert R.FromString(replay) == R.FromString(first)  # the same answer as a message ...
    assert replay == first  # ... and the same bytes


class GatedStore:
    """The real store, except that ``apply`` (and a transaction) waits at a gate while armed.

    It forces "a retry arrives while the first request is still writing" without sleeps:
    each write that reaches the gate is announced on ``entered``; all pass on ``release``.
    """

    def __init__(self, inner: RunStore, hold: int = 0) -> None:
        self._inner = inner
        self.hold = hold  # how many writes to stop at the gate
        self.entered: asyncio.Queue[None] = asyncio.Queue()
        self.release = asyncio.Event()
        self.replay_checks: asyncio.Queue[None] = asyncio.Queue()  # get_request answered

    async def close(self) -> None:
        await self._inner.close()

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None:
        return await self._inner.load(run_id, attempt_id, dedupe_key)

    async def apply(
        self, decision: Decision, dedupe_key: str | None, request: RequestRecord | None
    ) -> Applied:
        if self.hold > 0:
            self.hold -= 1
            self.entered.put_nowait(None)
            await self.release.wait()
        return await self._inner.apply(decision, dedupe_key, request)

    async def apply_creates(
        self, creates: Sequence[tuple[Decision, RequestRecord | None]]
    ) -> list[Applied]:
        if self.hold > 0:
            self.hold -= 1
            self.entered.put_nowait(None)
            await self.release.wait()
        return await self._inner.apply_creates(creates)

    def transaction(self, lock_keys: Sequence[str]) -> AbstractAsyncContextManager[RunTx]:
        return self._gated_transaction(lock_keys)

    @contextlib.asynccontextmanager
    async def _gated_transaction(self, lock_keys: Sequence[str]) -> AsyncIterator[RunTx]:
        """A transaction's writes wait at the gate before it begins (an approval writes its
        grant in one): SQLite's single writer would hold a second one out of the gate."""
        if self.hold > 0:
            self.hold -= 1
            self.entered.put_nowait(None)
            await self.release.wait()
        async with self._inner.transaction(lock_keys) as tx:
            yield tx

    async def find_by_idempotency_key(self, project_id: str, key: str) -> Loaded | None:
        return await self._inner.find_by_idempotency_key(project_id, key)

    async def started_attempts(self, owner_id: str, runtime_instance_id: str) -> Sequence[Attempt]:
        return await self._inner.started_attempts(owner_id, runtime_instance_id)

    async def load_attempts(self, attempt_ids: Sequence[str]) -> dict[str, Loaded]:
        return await self._inner.load_attempts(attempt_ids)

    async def apply_all(self, decisions: Sequence[Decision]) -> list[Applied]:
        return await self._inner.apply_all(decisions)

    async def renew_leases(
        self,
        owner_id: str,
        runtime_instance_id: str,
        attempt_ids: Sequence[str],
        now_ms: int,
        until_ms: int,
        token_until_ms: int = 0,
    ) -> int:
        return await self._inner.renew_leases(
            owner_id, runtime_instance_id, attempt_ids, now_ms, until_ms, token_until_ms
        )

    async def bind_instance(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> str:
        return await self._inner.bind_instance(owner_id, runtime_instance_id, now_ms)

    async def due_retries(self, updated_before_ms: int, limit: int) -> Sequence[str]:
        return await self._inner.due_retries(updated_before_ms, limit)

    async def expired_leases(self, now_ms: int, limit: int) -> Sequence[Attempt]:
        return await self._inner.expired_leases(now_ms, limit)

    async def oldest_non_terminal(self) -> dict[str, int]:
        return await self._inner.oldest_non_terminal()

    async def queued_by_project(self) -> dict[str, tuple[int, int]]:
        return await self._inner.queued_by_project()

    async def list_project_events(
        self, project_id: str | None, after: EventCursor | None, limit: int
    ) -> Sequence[RunEvent]:
        return await self._inner.list_project_events(project_id, after, limit)

    async def last_event_cursor(self) -> EventCursor | None:
        return await self._inner.last_event_cursor()

    async def silent_unknowns(self, silent_since_ms: int, limit: int) -> Sequence[Attempt]:
        return await self._inner.silent_unknowns(silent_since_ms, limit)

    async def get_request(self, request_id: str) -> StoredRequest | None:
        found = await self._inner.get_request(request_id)
        self.replay_checks.put_nowait(None)
        return found

    async def list_runs(
        self, run_filter: RunFilter, after: RunCursor | None, limit: int
    ) -> Sequence[Loaded]:
        return await self._inner.list_runs(run_filter, after, limit)

    async def list_events(self, run_id: str, after_sequence: int, limit: int) -> Sequence[RunEvent]:
        return await self._inner.list_events(run_id, after_sequence, limit)

    async def list_attempts(self, run_id: str) -> Sequence[Attempt]:
        return await self._inner.list_attempts(run_id)

    async def queue_position(self, run: Run) -> int:
        return await self._inner.queue_position(run)

    async def record_lineage(
        self, owner_id: str, runtime_instance_id: str, lineage: str, now_ms: int
    ) -> Sequence[str]:
        return await self._inner.record_lineage(owner_id, runtime_instance_id, lineage, now_ms)

    async def mark_replaced(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> None:
        await self._inner.mark_replaced(owner_id, runtime_instance_id, now_ms)

    async def read_output(self, attempt_id: str, offset: int, limit: int) -> Sequence[Stored]:
        return await self._inner.read_output(attempt_id, offset, limit)

    async def delete_output(self, finished_before_ms: int, limit: int) -> int:
        return await self._inner.delete_output(finished_before_ms, limit)


async def twins_in_flight(
    database_url: str,
    setup: Callable[[GrpcApi], Awaitable[Message]],
    method: str,
) -> tuple[bytes | BaseException, bytes | BaseException]:
    """Send ``setup``'s request twice with one request_id, the second while the first is held
    at the store's write, and return both answers (response bytes or the error). A third,
    later call must replay one of them and write nothing."""
    gates: list[GatedStore] = []

    def wrap(store: RunStore) -> RunStore:
        gates.append(GatedStore(store))
        return gates[0]

    # A CreateRun twin never reaches the store while the first is held there: it queues
    # behind that write (the group commit), so it is in flight once its replay check found
    # nothing; it then writes alone and meets the first one's record.
    grouped = method == "CreateRun"
    async with grpc_run_service(database_url, migrate=False, wrap_store=wrap) as api:
        gate = gates[0]
        request = await setup(api)
        async with raw_channel(api) as channel:
            gate.hold = 1 if grouped else 2
            first = asyncio.ensure_future(raw_call(channel, method, request))
            await asyncio.wait_for(gate.entered.get(), WAIT)
            while not gate.replay_checks.empty():
                gate.replay_checks.get_nowait()
            second = asyncio.ensure_future(raw_call(channel, method, request))
            await asyncio.wait_for((gate.replay_checks if grouped else gate.entered).get(), WAIT)
            gate.release.set()
            answers = await asyncio.wait_for(
                asyncio.gather(first, second, return_exceptions=True), WAIT
            )
            after = await snapshot(database_url)
            third = await raw_call(channel, method, request)
            assert third in answers
            assert await snapshot(database_url) == after
    return answers[0], answers[1]


async def test_create_run_twins_in_flight_get_one_answer_and_one_run(
    migrated_database_url: str,
) -> None:
    async def setup(api: GrpcApi) -> Message:
        return create_request(request_id=str(uuid.uuid4()))

    first, second = await twins_in_flight(migrated_database_url, setup, "CreateRun")
    assert isinstance(first, bytes), first
    assert second == first
    counts = await row_counts(migrated_database_url)
    assert (counts["runs"], counts["request_log"]) == (1, 1)


async def test_retry_run_twins_in_flight_get_one_answer_and_one_new_run(
    migrated_database_url: str,
) -> None:
    async def setup(api: GrpcApi) -> Message:
        run = await cancel(api, (await create(api)).id)
        return run_service_pb2.RetryRunRequest(id=run.id, request_id=str(uuid.uuid4()))

    first, second = await twins_in_flight(migrated_database_url, setup, "RetryRun")
    assert isinstance(first, bytes), first
    assert second == first
    counts = await row_counts(migrated_database_url)
    assert (counts["runs"], counts["request_log"]) == (2, 1)


async def test_cancel_run_twins_in_flight_get_one_answer(migrated_database_url: str) -> None:
    async def setup(api: GrpcApi) -> Message:
        run = await create(api)
        return run_service_pb2.CancelRunRequest(id=run.id, request_id=str(uuid.uuid4()))

    first, second = await twins_in_flight(migrated_database_url, setup, "CancelRun")
    assert isinstance(first, bytes), first
    assert isinstance(second, bytes), second
    outcomes = {run_service_pb2.CancelRunResponse.FromString(a).outcome for a in (first, second)}
    assert outcomes == {run_service_pb2.CANCEL_OUTCOME_CANCELLED}
    assert second == first


async def test_approve_run_twins_in_flight_get_one_answer(migrated_database_url: str) -> None:
    async def setup(api: GrpcApi) -> Message:
        run = await create(api, requires_approval=True)
        return run_service_pb2.ApproveRunRequest(id=run.id, request_id=str(uuid.uuid4()))

    first, second = await twins_in_flight(migrated_database_url, setup, "ApproveRun")
    assert isinstance(first, bytes), first
    assert isinstance(second, bytes), second
    assert second == first


# -- 4. idempotency keys --------------------------------------------------------------------


async def test_idempotency_key_conflict_policies(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    original = await create(grpc_api, idempotency_key="nightly-2024-01-01")
    before = await snapshot(migrated_database_url)

    for policy in (common_pb2.CONFLICT_POLICY_UNSPECIFIED, common_pb2.CONFLICT_POLICY_USE_EXISTING):
        response = await grpc_api.stub.CreateRun(
            create_request(idempotency_key="nightly-2024-01-01", conflict_policy=policy)
        )
        assert response.existing
        assert response.run.id == original.id
        assert response.run.version == original.version
        assert response.run.event_sequence == original.event_sequence
    assert await snapshot(migrated_database_url) == before

    for request_id in ("", str(uuid.uuid4())):
        info = await expect_error(
            grpc_api.stub.CreateRun(
                create_request(
                    idempotency_key="nightly-2024-01-01",
                    conflict_policy=common_pb2.CONFLICT_POLICY_FAIL,
                    request_id=request_id,
                )
            ),
            grpc.StatusCode.ALREADY_EXISTS,
            "IDEMPOTENCY_KEY_CONFLICT",
        )
        assert info.metadata["existing_run_id"] == original.id
        assert await snapshot(migrated_database_url) == before

    # The key is per project.
    elsewhere = await create(grpc_api, project_id="proj-b", idempotency_key="nightly-2024-01-01")
    assert elsewhere.id != original.id


# -- 5. reads never write -------------------------------------------------------------------


READS = 200


async def test_reads_never_write(grpc_api: GrpcApi, migrated_database_url: str) -> None:
    R = run_service_pb2
    stub = grpc_api.stub
    queued = await create(grpc_api, agent_id="agent-1", idempotency_key="k1")
    await create(grpc_api, owner_id="owner-b", project_id="proj-b", priority=5)
    pending = await create(grpc_api, requires_approval=True)
    approved_source = await create(grpc_api, requires_approval=True)
    await stub.ApproveRun(R.ApproveRunRequest(id=approved_source.id))
    cancelled = await cancel(grpc_api, (await create(grpc_api, agent_id="agent-1")).id)
    retry = await stub.RetryRun(R.RetryRunRequest(id=cancelled.id, request_id="retry-1"))
    run_ids = [queued.id, pending.id, approved_source.id, cancelled.id, retry.id]
    assert {(await stub.GetRun(R.GetRunRequest(id=i))).status for i in run_ids} == {
        RS.RUN_STATUS_QUEUED,
        RS.RUN_STATUS_PENDING_APPROVAL,
        RS.RUN_STATUS_CANCELLED,
    }
    sequences = {i: (await stub.GetRun(R.GetRunRequest(id=i))).event_sequence for i in run_ids}

    filters: list[dict[str, Any]] = [
        {},
        {"project_id": "proj-a"},
        {"owner_id": "owner-b"},
        {"agent_id": "agent-1"},
        {"statuses": [RS.RUN_STATUS_QUEUED, RS.RUN_STATUS_CANCELLED]},
        {"display_states": [DS.DISPLAY_STATE_PENDING_APPROVAL]},
        {"display_states": [DS.DISPLAY_STATE_QUEUED], "project_id": "proj-a"},
        {"project_id": "nobody"},
    ]
    missing = str(uuid.uuid4())
    before = await snapshot(migrated_database_url)

    with sqlite_commits(migrated_database_url) as committed:
        for n in range(READS):
            run_id = run_ids[n % len(run_ids)]
            assert (await stub.GetRun(R.GetRunRequest(id=run_id))).id == run_id
            if n % 10 == 0:
                await expect_error(
                    stub.GetRun(R.GetRunRequest(id=missing)),
                    grpc.StatusCode.NOT_FOUND,
                    "RUN_NOT_FOUND",
                )
            await all_runs(grpc_api, page_size=1 + n % 3, **filters[n % len(filters)])
            events = await all_events(grpc_api, run_id, page_size=1 + n % 2)
            assert len(events) == sequences[run_id]
            watch = stub.WatchRunEvents(R.WatchRunEventsRequest(run_id=run_id))
            watched = await watch_until(watch, sequences[run_id])
            watch.cancel()
            assert watched == events
            if n % 20 == 0:
                total = sum(sequences.values())
                stream = await project_stream(grpc_api, "proj-a", total, page_size=1 + n % 7)
                assert len(stream) == total
                project_watch = stub.WatchRunEvents(R.WatchRunEventsRequest(project_id="proj-a"))
                assert [await asyncio.wait_for(project_watch.read(), WAIT) for _ in stream] == (
                    stream
                )
                project_watch.cancel()
        assert not committed(), "a read committed a transaction"

    assert await snapshot(migrated_database_url) == before


async def project_stream(
    api: GrpcApi, project_id: str, expected: int, page_size: int = 0
) -> list[common_pb2.RunEvent]:
    """The project's stream by ListProjectEvents pages, read again until ``expected`` events
    are in it (on PostgreSQL any open transaction in the cluster may hold the newest back)."""
    async with asyncio.timeout(WAIT):
        while True:
            events: list[common_pb2.RunEvent] = []
            cursor = ""
            while page := await api.stub.ListProjectEvents(
                run_service_pb2.ListProjectEventsRequest(
                    project_id=project_id, after_cursor=cursor, page_size=page_size
                )
            ):
                if not page.events:
                    assert page.next_cursor == cursor
                    break
                events.extend(page.events)
                cursor = page.next_cursor
            if len(events) >= expected:
                return events
            await asyncio.sleep(0.05)


# -- 6. ListRuns ----------------------------------------------------------------------------


async def test_list_runs_paging_and_filters(grpc_api: GrpcApi) -> None:
    R = run_service_pb2
    stub = grpc_api.stub
    made: list[common_pb2.Run] = []
    layout: list[dict[str, Any]] = [
        {"project_id": "proj-a", "owner_id": "owner-a", "agent_id": "agent-1"},
        {"project_id": "proj-a", "owner_id": "owner-b", "requires_approval": True},
        {"project_id": "proj-b", "owner_id": "owner-a"},
        {"project_id": "proj-b", "owner_id": "owner-b", "agent_id": "agent-1"},
        {"project_id": "proj-a", "owner_id": "owner-a", "requires_approval": True},
        {"project_id": "proj-b", "owner_id": "owner-a"},
        {"project_id": "proj-a", "owner_id": "owner-b"},
    ]
    for fields in layout:
        made.append(await create(grpc_api, **fields))
    made[2] = await cancel(grpc_api, made[2].id)
    made[6] = await cancel(grpc_api, made[6].id)
    newest_first = [r.id for r in reversed(made)]

    runs, pages = await all_runs(grpc_api, page_size=2)
    assert [r.id for r in runs] == newest_first
    assert pages == 4
    runs, pages = await all_runs(grpc_api, page_size=7)
    assert [r.id for r in runs] == newest_first
    assert pages in (1, 2)  # AIP-158 allows a last empty page

    def expected(keep: Callable[[common_pb2.Run], bool]) -> list[str]:
        return [r.id for r in reversed(made) if keep(r)]

    cases: list[tuple[dict[str, Any], Callable[[common_pb2.Run], bool]]] = [
        ({"owner_id": "owner-a"}, lambda r: r.owner_id == "owner-a"),
        ({"project_id": "proj-b"}, lambda r: r.project_id == "proj-b"),
        ({"agent_id": "agent-1"}, lambda r: r.agent_id == "agent-1"),
        (
            {"project_id": "proj-a", "owner_id": "owner-b"},
            lambda r: (r.project_id, r.owner_id) == ("proj-a", "owner-b"),
        ),
        ({"statuses": [RS.RUN_STATUS_CANCELLED]}, lambda r: r.status == RS.RUN_STATUS_CANCELLED),
        (
            {"statuses": [RS.RUN_STATUS_QUEUED, RS.RUN_STATUS_PENDING_APPROVAL]},
            lambda r: r.status != RS.RUN_STATUS_CANCELLED,
        ),
        (
            {"display_states": [DS.DISPLAY_STATE_PENDING_APPROVAL]},
            lambda r: r.status == RS.RUN_STATUS_PENDING_APPROVAL,
        ),
        (
            {"display_states": [DS.DISPLAY_STATE_QUEUED, DS.DISPLAY_STATE_CANCELLED]},
            lambda r: r.status != RS.RUN_STATUS_PENDING_APPROVAL,
        ),
        (
            {"display_states": [DS.DISPLAY_STATE_QUEUED], "owner_id": "owner-a"},
            lambda r: r.status == RS.RUN_STATUS_QUEUED and r.owner_id == "owner-a",
        ),
        ({"statuses": [RS.RUN_STATUS_SUCCEEDED]}, lambda r: False),
        ({"project_id": "proj-z"}, lambda r: False),
    ]
    for filters, keep in cases:
        want = expected(keep)
        for page_size in (0, 1, 2):
            runs, _ = await all_runs(grpc_api, page_size=page_size, **filters)
            assert [r.id for r in runs] == want, (filters, page_size)
    listed = {r.id: r for r in (await all_runs(grpc_api))[0]}
    for run in made:
        got = await stub.GetRun(R.GetRunRequest(id=run.id))
        assert listed[run.id].display_state == got.display_state
        assert listed[run.id].status == got.status == run.status

    page = await stub.ListRuns(R.ListRunsRequest(page_size=2, owner_id="owner-a"))
    assert page.next_page_token
    for other in (
        {"owner_id": "owner-b"},
        {},
        {"owner_id": "owner-a", "project_id": "proj-a"},
        {"owner_id": "owner-a", "statuses": [RS.RUN_STATUS_QUEUED]},
        {"owner_id": "owner-a", "display_states": [DS.DISPLAY_STATE_QUEUED]},
    ):
        await expect_error(
            stub.ListRuns(R.ListRunsRequest(page_size=2, page_token=page.next_page_token, **other)),
            INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
        )
    # The same filter with another page size may continue.
    rest = await stub.ListRuns(
        R.ListRunsRequest(page_size=50, owner_id="owner-a", page_token=page.next_page_token)
    )
    assert [r.id for r in page.runs] + [r.id for r in rest.runs] == expected(
        lambda r: r.owner_id == "owner-a"
    )


def tampered(token: str, **changes: Any) -> str:
    """``token`` (base64url JSON, the server's own format) with some fields changed or
    dropped (a value of None drops the field): what a client that pokes at a token sends."""
    payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    for key, value in changes.items():
        if value is None:
            payload.pop(key, None)
        else:
            payload[key] = value
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


async def test_tampered_page_tokens_are_invalid_arguments(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    R = run_service_pb2
    stub = grpc_api.stub
    run = await create(grpc_api)
    await create(grpc_api)
    runs_token = (await stub.ListRuns(R.ListRunsRequest(page_size=1))).next_page_token
    events_token = (
        await stub.ListRunEvents(R.ListRunEventsRequest(run_id=run.id, page_size=1))
    ).next_page_token
    assert runs_token and events_token
    before = await snapshot(migrated_database_url)
    bad: dict[str, Callable[[], Awaitable[Any]]] = {
        "ListRuns cursor time not a number": lambda: stub.ListRuns(
            R.ListRunsRequest(page_size=1, page_token=tampered(runs_token, c="soon"))
        ),
        "ListRuns cursor missing": lambda: stub.ListRuns(
            R.ListRunsRequest(page_size=1, page_token=tampered(runs_token, c=None))
        ),
        "ListRunEvents sequence not a number": lambda: stub.ListRunEvents(
            R.ListRunEventsRequest(run_id=run.id, page_token=tampered(events_token, s="x"))
        ),
        "ListRunEvents sequence missing": lambda: stub.ListRunEvents(
            R.ListRunEventsRequest(run_id=run.id, page_token=tampered(events_token, s=None))
        ),
    }
    codes = {}
    for name, make_call in bad.items():
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await make_call()
        codes[name] = (caught.value.code(), error_info(caught.value).reason)
    assert codes == {name: (INVALID_ARGUMENT, "INVALID_ARGUMENT") for name in bad}
    assert await snapshot(migrated_database_url) == before


# -- 7. WatchRunEvents ----------------------------------------------------------------------


async def test_watch_resumes_after_a_sequence(grpc_api: GrpcApi) -> None:
    R = run_service_pb2
    pending = await create(grpc_api, requires_approval=True)
    await grpc_api.stub.ApproveRun(R.ApproveRunRequest(id=pending.id))
    run = await cancel(grpc_api, pending.id)
    events = await all_events(grpc_api, run.id)
    assert [e.sequence for e in events] == list(range(1, run.event_sequence + 1))
    assert len(events) >= 4

    for after in range(run.event_sequence):
        call = grpc_api.stub.WatchRunEvents(
            R.WatchRunEventsRequest(run_id=run.id, after_sequence=after)
        )
        got = await watch_until(call, run.event_sequence)
        call.cancel()
        assert got == events[after:]
        listed = await grpc_api.stub.ListRunEvents(
            R.ListRunEventsRequest(run_id=run.id, after_sequence=after)
        )
        assert list(listed.events) == events[after:]


async def test_watch_streams_committed_changes_only(grpc_api: GrpcApi) -> None:
    R = run_service_pb2
    stub = grpc_api.stub
    run = await create(grpc_api, requires_approval=True)
    watch = stub.WatchRunEvents(R.WatchRunEventsRequest(run_id=run.id))
    streamed = await watch_until(watch, run.event_sequence)
    assert streamed == await all_events(grpc_api, run.id)

    # Refused changes commit nothing, so nothing may be streamed for them.
    await expect_error(
        stub.ApproveRun(R.ApproveRunRequest(id=run.id, etag=etag(run.version + 7))),
        grpc.StatusCode.ABORTED,
        "RUN_VERSION_CONFLICT",
    )
    await expect_error(
        stub.RetryRun(R.RetryRunRequest(id=run.id)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "INVALID_RUN_TRANSITION",
    )
    await expect_error(
        stub.CancelRun(R.CancelRunRequest(id=run.id, reason="x" * 600)),
        INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
    )

    # A change committed while watching arrives on the open stream.
    approved = await stub.ApproveRun(R.ApproveRunRequest(id=run.id, etag=run.etag))
    streamed += await watch_until(watch, approved.event_sequence)
    assert [e.type for e in streamed[-(approved.event_sequence - run.event_sequence) :]] == [
        "run.approved",
        "run.queued",
    ]
    cancelled = await stub.CancelRun(R.CancelRunRequest(id=run.id, reason="done"))
    assert cancelled.outcome == R.CANCEL_OUTCOME_CANCELLED
    streamed += await watch_until(watch, cancelled.run.event_sequence)
    assert streamed[-1].type == "run.cancelled"
    # Cancelling again changes nothing and commits no event.
    again = await stub.CancelRun(R.CancelRunRequest(id=run.id))
    assert again.outcome == R.CANCEL_OUTCOME_ALREADY_TERMINAL
    assert again.run.event_sequence == cancelled.run.event_sequence
    watch.cancel()

    assert streamed == await all_events(grpc_api, run.id)
    assert [e.sequence for e in streamed] == list(range(1, cancelled.run.event_sequence + 1))


# -- 8. health and reflection ---------------------------------------------------------------


async def test_health_serving_and_reflection_lists_the_service(grpc_api: GrpcApi) -> None:
    async with grpc.aio.insecure_channel(grpc_api.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE):
            response = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert response.status == health_pb2.HealthCheckResponse.SERVING

        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        stream = reflection.ServerReflectionInfo()
        await stream.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        answer = await asyncio.wait_for(stream.read(), WAIT)
        await stream.write(reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE))
        described = await asyncio.wait_for(stream.read(), WAIT)
        await stream.done_writing()
    names = {s.name for s in answer.list_services_response.service}
    assert SERVICE in names
    assert "grpc.health.v1.Health" in names
    assert described.file_descriptor_response.file_descriptor_proto


# -- 9. deadlines ---------------------------------------------------------------------------


async def test_client_deadline_is_honoured(grpc_api: GrpcApi) -> None:
    run = await create(grpc_api)
    # A watch with nothing after its sequence never ends on its own, so a 1 ms deadline must
    # be what ends it, whatever the machine's speed.
    call = grpc_api.stub.WatchRunEvents(
        run_service_pb2.WatchRunEventsRequest(run_id=run.id, after_sequence=run.event_sequence),
        timeout=0.001,
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(drain(call), WAIT)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # The server is fine afterwards.
    assert (await grpc_api.stub.GetRun(run_service_pb2.GetRunRequest(id=run.id))).id == run.id
