"""ListProjectEvents and the project-wide WatchRunEvents over a real gRPC server, on SQLite and
PostgreSQL; and watches that see commits made through another server process."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from truerun.v1 import common_pb2, run_service_pb2, run_service_pb2_grpc

from kernel.db.migrate import upgrade
from tests.integration.test_run_service_grpc import (
    WAIT,
    cancel,
    create,
    expect_error,
    project_stream,
    snapshot,
)
from tests.support.auth import aio_channel
from tests.support.grpc_server import GrpcApi, grpc_run_service

if TYPE_CHECKING:
    from truerun.v1.run_service_pb2_grpc import RunServiceAsyncStub

R = run_service_pb2


async def read(call: grpc.aio.UnaryStreamCall[Any, common_pb2.RunEvent], n: int) -> list[Any]:
    """The next ``n`` events of a watch, each within WAIT."""
    events = []
    for _ in range(n):
        event = await asyncio.wait_for(call.read(), WAIT)
        assert isinstance(event, common_pb2.RunEvent), f"the watch ended: {event!r}"
        events.append(event)
    return events


async def test_malformed_cursors_and_arguments_are_rejected_and_write_nothing(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    stub = grpc_api.stub
    run = await create(grpc_api)
    before = await snapshot(migrated_database_url)

    def watch(**fields: Any) -> Callable[[], Awaitable[Any]]:
        async def drain() -> None:
            async for _ in stub.WatchRunEvents(R.WatchRunEventsRequest(**fields)):
                pass

        return drain

    bad_cursors = [
        "x",
        "0" * 33,
        "0000000000000001-0000000000000002",
        "0000000000000001.000000000000000G",
        "0000000000000001.00000000000000020",
        "8000000000000000.0000000000000001",  # beyond BIGINT
        " 0000000000000001.0000000000000002",
    ]
    for cursor in bad_cursors:
        await expect_error(
            stub.ListProjectEvents(R.ListProjectEventsRequest(project_id="p", after_cursor=cursor)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_CURSOR",
        )
        await expect_error(
            watch(project_id="p", after_cursor=cursor)(),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_CURSOR",
        )
    invalid: list[Awaitable[Any]] = [
        stub.ListProjectEvents(R.ListProjectEventsRequest()),
        stub.ListProjectEvents(R.ListProjectEventsRequest(project_id="p", page_size=-1)),
        stub.ListProjectEvents(R.ListProjectEventsRequest(project_id="bad project")),
        watch(project_id="p", after_sequence=3)(),
        watch(run_id=run.id, after_cursor="0000000000000001.0000000000000002")(),
        watch()(),
    ]
    for call in invalid:
        await expect_error(call, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert await snapshot(migrated_database_url) == before


async def test_pages_are_capped_and_next_cursor_resumes(grpc_api: GrpcApi) -> None:
    stub = grpc_api.stub
    runs = [await create(grpc_api) for _ in range(4)]
    total = sum(r.event_sequence for r in runs)
    stream = await project_stream(grpc_api, "proj-a", total)
    assert [(e.run_id, e.sequence) for e in stream] == [
        (r.id, s) for r in runs for s in range(1, r.event_sequence + 1)
    ]
    assert all(e.project_id == "proj-a" and e.cursor.isascii() for e in stream)
    assert [e.cursor for e in stream] == sorted({e.cursor for e in stream})
    page = await stub.ListProjectEvents(R.ListProjectEventsRequest(project_id="proj-a"))
    assert list(page.events) == stream and page.next_cursor == stream[-1].cursor
    big = await stub.ListProjectEvents(
        R.ListProjectEventsRequest(project_id="proj-a", page_size=100_000)
    )
    assert list(big.events) == stream
    mid = stream[2].cursor
    rest = await stub.ListProjectEvents(
        R.ListProjectEventsRequest(project_id="proj-a", after_cursor=mid, page_size=2)
    )
    assert list(rest.events) == stream[3:5] and rest.next_cursor == stream[4].cursor
    end = await stub.ListProjectEvents(
        R.ListProjectEventsRequest(project_id="proj-a", after_cursor=stream[-1].cursor)
    )
    assert list(end.events) == [] and end.next_cursor == stream[-1].cursor
    other = await stub.ListProjectEvents(R.ListProjectEventsRequest(project_id="proj-none"))
    assert list(other.events) == [] and other.next_cursor == ""
    # Per-run reads carry the same cursor and project.
    watched = await read(
        stub.WatchRunEvents(R.WatchRunEventsRequest(run_id=runs[0].id)), runs[0].event_sequence
    )
    assert watched == [e for e in stream if e.run_id == runs[0].id]


async def test_project_watch_replays_follows_and_resumes_exactly(grpc_api: GrpcApi) -> None:
    stub = grpc_api.stub
    first = await create(grpc_api)
    await create(grpc_api, project_id="proj-other")
    watch = stub.WatchRunEvents(R.WatchRunEventsRequest(project_id="proj-a"))
    got = await read(watch, first.event_sequence)
    second = await create(grpc_api)
    await cancel(grpc_api, second.id)
    cancelled = (await stub.GetRun(R.GetRunRequest(id=second.id))).event_sequence
    got += await read(watch, cancelled)
    watch.cancel()
    assert [(e.run_id, e.sequence) for e in got] == [
        (first.id, s) for s in range(1, first.event_sequence + 1)
    ] + [(second.id, s) for s in range(1, cancelled + 1)]

    # Reconnect from every cursor received: exactly the rest, then new commits.
    third = await create(grpc_api)
    for i in (0, len(got) // 2, len(got) - 1):
        resumed = stub.WatchRunEvents(
            R.WatchRunEventsRequest(project_id="proj-a", after_cursor=got[i].cursor)
        )
        rest = await read(resumed, len(got) - i - 1 + third.event_sequence)
        assert rest[: len(got) - i - 1] == got[i + 1 :]
        assert {e.run_id for e in rest[len(got) - i - 1 :]} == {third.id}
        with pytest.raises(TimeoutError):  # nothing more: no duplicates trail behind
            await asyncio.wait_for(resumed.read(), 0.5)
        resumed.cancel()


@contextlib.asynccontextmanager
async def second_server(database_url: str) -> AsyncIterator[RunServiceAsyncStub]:
    """Another RunService server on the same database, in a process of its own."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.run_service_process",
        database_url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert line.startswith("listening on "), line
        async with aio_channel(line.split()[-1]) as channel:
            yield run_service_pb2_grpc.RunServiceStub(channel)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 20)
        except TimeoutError:
            process.kill()
            await process.wait()


async def test_watches_see_commits_made_through_another_server_process(pg_url: str) -> None:
    await upgrade(pg_url)
    async with grpc_run_service(pg_url, migrate=False) as a, second_server(pg_url) as b:
        run = await create(a)
        per_run = a.stub.WatchRunEvents(R.WatchRunEventsRequest(run_id=run.id))
        project = a.stub.WatchRunEvents(R.WatchRunEventsRequest(project_id="proj-a"))
        replayed = await read(per_run, run.event_sequence)
        assert await read(project, run.event_sequence) == replayed

        cancelled = await b.CancelRun(R.CancelRunRequest(id=run.id))  # committed by B
        assert cancelled.outcome == R.CANCEL_OUTCOME_CANCELLED
        n_new = cancelled.run.event_sequence - run.event_sequence
        seen = await read(per_run, n_new)
        assert [e.sequence for e in seen] == list(
            range(run.event_sequence + 1, cancelled.run.event_sequence + 1)
        )
        assert await read(project, n_new) == seen

        created = await b.CreateRun(  # a new run, created through B
            R.CreateRunRequest(project_id="proj-a", owner_id="owner-a", task_id="t")
        )
        assert {e.run_id for e in await read(project, created.run.event_sequence)} == {
            created.run.id
        }
        per_run.cancel()
        project.cancel()
