"""The batched stream on the runtime's side: the agent says it reads Starts, handles a Starts
message's Starts one by one as single Starts, and its writer sends the answers queued
together in one StartResults message and the events in one RuntimeEvents message (each
attempt's answer before its events; other messages are boundaries)."""

from __future__ import annotations

import asyncio

from google.protobuf import struct_pb2
from truerun.v1 import runtime_service_pb2 as pb

from tests.runtime.conftest import StartAgent
from tests.support.fake_runtime_server import FakeRuntimeServer, task_id
from truerun_runtime._stream import MAX_EVENTS_PER_MESSAGE, Batcher

ACCEPTED = pb.RUNTIME_EVENT_TYPE_ACCEPTED


def _start(attempt_id: str, command: str) -> pb.Start:
    spec = struct_pb2.Struct()
    spec.update({"command": command})
    return pb.Start(
        run_id=f"run-{attempt_id}",
        attempt_id=attempt_id,
        runtime_task_id=task_id(attempt_id),
        callback_token=f"cb-{attempt_id}",
        spec=spec,
    )


async def test_a_starts_message_is_its_starts_one_by_one(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    await start_agent(limit=3)
    session = await server.connected()
    assert session.hello.accepts_batches, "the agent says it reads Starts"
    starts = [_start(a, f"echo {a}") for a in ("a1", "a2", "a3")]
    session.send(pb.ConnectResponse(starts=pb.Starts(starts=starts)))
    await server.wait_for(
        lambda: all(server.terminal(a) for a in ("a1", "a2", "a3")), what="all three done"
    )
    for attempt in ("a1", "a2", "a3"):
        assert server.output(attempt) == f"{attempt}\n"
        assert server.types(attempt).count(ACCEPTED) == 1
    kinds = [
        (m.WhichOneof("kind"), m.start_result.attempt_id or m.event.attempt_id)
        for m in session.received
        if m.WhichOneof("kind") in ("start_result", "event")
    ]
    answers = [a for kind, a in kinds if kind == "start_result"]
    assert answers == ["a1", "a2", "a3"], "one answer per Start, in order"
    for attempt in answers:
        assert kinds.index(("start_result", attempt)) < kinds.index(("event", attempt)), (
            "each StartResult goes before its attempt's first event"
        )


def _event(attempt_id: str, seq: int) -> pb.ConnectRequest:
    return pb.ConnectRequest(event=pb.RuntimeEvent(attempt_id=attempt_id, seq=seq, type=ACCEPTED))


def _answer(attempt_id: str) -> pb.ConnectRequest:
    return pb.ConnectRequest(start_result=pb.StartResult(attempt_id=attempt_id, accepted=True))


def _shape(message: pb.ConnectRequest | None) -> list[tuple[str, str, int]]:
    """What a message carries: (kind, attempt, seq) per answer or event, in order."""
    if message is None:
        return [("end", "", 0)]
    kind = message.WhichOneof("kind")
    if kind == "events":
        return [("event", e.attempt_id, e.seq) for e in message.events.events]
    if kind == "start_results":
        return [("answer", r.attempt_id, 0) for r in message.start_results.results]
    if kind == "event":
        return [("event", message.event.attempt_id, message.event.seq)]
    if kind == "start_result":
        return [("answer", message.start_result.attempt_id, 0)]
    return [(str(kind), "", 0)]


async def test_the_writer_sends_the_queued_events_together_in_order() -> None:
    queue: asyncio.Queue[pb.ConnectRequest | None] = asyncio.Queue()
    batcher = Batcher(queue)
    queue.put_nowait(_event("a1", 1))
    assert (await batcher.next()) == _event("a1", 1), "a lone event goes at once, as itself"
    queue.put_nowait(_answer("a0"))
    assert (await batcher.next()) == _answer("a0"), "a lone answer goes at once, as itself"

    for message in (_event("a1", 2), _event("a1", 3), _answer("a2"), _event("a2", 1), None):
        queue.put_nowait(message)
    answer, events = await batcher.next(), await batcher.next()
    assert answer == _answer("a2"), "one answer goes as itself, before the events"
    assert _shape(events) == [("event", "a1", 2), ("event", "a1", 3), ("event", "a2", 1)]
    assert (await batcher.next()) is None

    for seq in range(1, MAX_EVENTS_PER_MESSAGE + 2):
        queue.put_nowait(_event("a3", seq))
    full, rest = await batcher.next(), await batcher.next()
    assert full is not None and len(full.events.events) == MAX_EVENTS_PER_MESSAGE, "bounded"
    assert rest == _event("a3", MAX_EVENTS_PER_MESSAGE + 1)


async def test_a_rounds_answers_go_together_and_a_heartbeat_is_a_boundary() -> None:
    """What the agent queues for a Starts message of two (each answer, then that attempt's
    events), a heartbeat, then a third Start: two messages for the round, the heartbeat
    in its place, then the third's answer and event."""
    queue: asyncio.Queue[pb.ConnectRequest | None] = asyncio.Queue()
    batcher = Batcher(queue)
    heartbeat = pb.ConnectRequest(heartbeat=pb.Heartbeat())
    queued = [_answer("a1"), _event("a1", 1), _event("a1", 2), _answer("a2"), _event("a2", 1)]
    for message in [*queued, heartbeat, _answer("a3"), _event("a3", 1), None]:
        queue.put_nowait(message)
    sent = [await batcher.next() for _ in range(6)]
    assert [_shape(m) for m in sent] == [
        [("answer", "a1", 0), ("answer", "a2", 0)],
        [("event", "a1", 1), ("event", "a1", 2), ("event", "a2", 1)],
        [("heartbeat", "", 0)],
        [("answer", "a3", 0)],
        [("event", "a3", 1)],
        [("end", "", 0)],
    ]
    assert sent[0] is not None and sent[0].WhichOneof("kind") == "start_results"
    assert sent[1] is not None and sent[1].WhichOneof("kind") == "events"
    assert queue.empty()
