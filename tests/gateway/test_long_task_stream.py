"""``GET /v1/projects/{p}/longTasks:stream`` against a live stack, on SQLite and PostgreSQL:
it wants a token (a query token too, as EventSource sends it) that sees the project; it
sends every shown task first (whole, with the server's display words), then a task again
each time its etag or its label moves (a queued task's place moves with the others), and
never one that did not move; a task finished long ago is not shown."""

from __future__ import annotations

import httpx
from google.protobuf import timestamp_pb2
from truerun.v1 import long_task_service_pb2 as pb

from gateway.routes.long_task_stream import RECENT_MS, shown
from tests.gateway.test_long_tasks import AUTH, TASKS, _command, _created
from tests.gateway.test_rest import assert_problem
from tests.support.gateway_stack import ALL, Q_TOKEN, bearer
from tests.support.sse_client import open_stream

STREAM = f"{TASKS}:stream"


async def test_the_stream_sends_each_task_then_every_change(http: httpx.AsyncClient) -> None:
    assert_problem(await http.get(STREAM), 401, "UNAUTHENTICATED")
    assert_problem(await http.get(STREAM, headers=bearer(Q_TOKEN)), 403, "PERMISSION_DENIED")
    first = await _created(http, task_id="one")
    await _created(http, task_id="two")
    async with open_stream(http, STREAM, params={"access_token": ALL}) as stream:
        sent = [await stream.next_message() for _ in range(2)]
        assert {m.event for m in sent} == {"long_task"}
        by_id = {m.json()["long_task_id"]: m.json() for m in sent}
        assert set(by_id) == {"one", "two"}
        assert by_id["one"]["display_label"] == "planned, not started"
        assert by_id["one"]["display_action"] == "start"
        assert [s["step_id"] for s in by_id["one"]["steps"]] == ["build", "upload"]  # whole
        paused = await _command(http, "pause", {"etag": first["etag"]}, f"{TASKS}/one")
        moved = (await stream.next_message()).json()
        assert moved["long_task_id"] == "one" and moved["etag"] == paused["etag"]
        assert moved["display_state"] == "paused" and moved["display_action"] == "resume"
        cancelled = await _command(http, "cancel", {"etag": paused["etag"]}, f"{TASKS}/one")
        ended = (await stream.next_message()).json()
        assert (ended["long_task_id"], ended["etag"]) == ("one", cancelled["etag"])
        assert ended["display_state"] == "cancelled"  # finished now: still shown
    listed = (await http.get(TASKS, headers=AUTH)).json()["long_tasks"]
    assert {t["long_task_id"] for t in listed} == {"one", "two"}


async def test_a_queued_tasks_place_moves_without_its_etag(http: httpx.AsyncClient) -> None:
    """No watcher runs here, so started tasks stay queued: the second is behind the first;
    cancelling the first moves the second's place (its label), not its etag."""
    first = await _created(http, task_id="first")
    second = await _created(http, task_id="second")
    first = await _command(http, "start", {"etag": first["etag"]}, f"{TASKS}/first")
    second = await _command(http, "start", {"etag": second["etag"]}, f"{TASKS}/second")
    assert second["display_label"] == "queued: 1 ahead of it", second
    async with open_stream(http, STREAM, headers=AUTH) as stream:
        for _ in range(2):
            await stream.next_message()
        await _command(http, "cancel", {"etag": first["etag"]}, f"{TASKS}/first")
        moved = {m["long_task_id"]: m for m in [(await stream.next_message()).json()]}
        moved |= {m["long_task_id"]: m for m in [(await stream.next_message()).json()]}
    assert moved["first"]["display_state"] == "cancelled"
    assert moved["second"]["etag"] == second["etag"]  # it did not change itself
    assert moved["second"]["display_label"] == "queued: 0 ahead of it"


def test_a_task_finished_long_ago_is_not_shown() -> None:
    now = 10 * RECENT_MS
    active = pb.LongTask(long_task_id="a")
    recent = pb.LongTask(long_task_id="r", finish_time=_at(now - RECENT_MS))
    old = pb.LongTask(long_task_id="o", finish_time=_at(now - RECENT_MS - 1))
    assert [shown(t, now) for t in (active, recent, old)] == [True, True, False]


def _at(ms: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp
