"""Issue #7, "Must show" 2: SIGTERM to a coordinator holding every runtime stream. It drains
(no new claims, Starts answered, events read applied and acknowledged, streams ended) and
exits in time; the agents reconnect to the other coordinator and resend what was not
acknowledged. Every run finishes; no event is lost or applied twice (each attempt's runtime
seqs 1..n once each, each output line once, run sequences gapless) and no Start was left
unanswered by the shutdown."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from google.protobuf import struct_pb2
from truerun.v1 import common_pb2, run_service_pb2, run_service_pb2_grpc

from tests.integration.test_claim_race import REDIS_URL
from tests.support.auth import aio_channel
from tests.support.processes import STREAM_OPEN
from tests.support.replicas import Deployment

pytestmark = [pytest.mark.multi, pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(600)]

RUNS = 16
LINES = 6
USER = common_pb2.Actor(type=common_pb2.ACTOR_TYPE_USER, id="drain")
EXPECTED_OUTPUT = "".join(f"line-{i}\n" for i in range(1, LINES + 1))


@pytest.fixture
def deployment(pg_url: str, tmp_path: Path) -> Iterator[Deployment]:
    owner = f"drain-{uuid.uuid4().hex[:8]}"
    deployment = Deployment(tmp_path, pg_url, REDIS_URL, owner)
    try:
        yield deployment
    finally:
        deployment.close()


async def _wait(conn: asyncpg.Connection, sql: str, *args: object, want: int) -> None:
    deadline = time.monotonic() + 240
    while (n := int(await conn.fetchval(sql, *args))) < want:
        if time.monotonic() >= deadline:
            stuck = await conn.fetch(
                "SELECT r.id, r.status, a.status AS attempt, a.observed_state, a.sync_state, "
                "a.sync_reason, a.last_event_seq, a.runtime_instance_id FROM runs r "
                "JOIN attempts a ON a.id = r.current_attempt_id WHERE r.owner_id = $1 AND "
                "r.status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out')",
                args[0],
            )
            raise AssertionError(f"{n} < {want}: {sql}; not finished: {[dict(r) for r in stuck]}")
        await asyncio.sleep(0.2)


async def test_sigterm_drains_runtime_streams_to_another_coordinator(
    deployment: Deployment, pg_url: str
) -> None:
    deployment.migrate()
    deployment.start(coordinators=2, capacities=1, reconcilers=1)
    agents = [deployment.agent(i, 4, order=[0, 1]) for i in range(2)]  # both on coordinator 0
    owner = deployment.owner
    conn = await asyncpg.connect(pg_url)
    try:
        target = f"127.0.0.1:{deployment.coordinator_ports[1]}"
        async with aio_channel(target) as channel:
            stub = run_service_pb2_grpc.RunServiceStub(channel)
            command = f"for i in $(seq 1 {LINES}); do echo line-$i; sleep 0.3; done"
            for i in range(RUNS):
                spec = struct_pb2.Struct()
                spec.update({"command": command})
                await stub.CreateRun(
                    run_service_pb2.CreateRunRequest(
                        project_id="drain", owner_id=owner, task_id=f"t{i}", spec=spec, actor=USER
                    ),
                    timeout=30,
                )
        # Streams busy: several commands are printing when the SIGTERM comes.
        await _wait(
            conn,
            "SELECT count(DISTINCT a.run_id) FROM attempt_output o "
            "JOIN attempts a ON a.id = o.attempt_id WHERE a.owner_id = $1",
            owner,
            want=4,
        )
        draining = deployment.replica("coordinator", 0).proc
        signalled = time.monotonic()
        draining.popen.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(draining.popen.wait, 30)
        took = time.monotonic() - signalled
        assert code == 0, draining.log()[-3000:]
        assert "coordinator stopped" in draining.log()
        assert "not drained" not in draining.log()
        assert took < 10 + 5, took  # TRUERUN_GRACE_SECONDS=10, plus process exit
        await _wait(
            conn,
            "SELECT count(*) FROM runs WHERE owner_id = $1 AND status IN "
            "('succeeded', 'failed', 'cancelled', 'timed_out')",
            owner,
            want=RUNS,
        )
        reconnected = [len(STREAM_OPEN.findall(agent.log())) for agent in agents]
        assert all(n >= 2 for n in reconnected), reconnected
        await _check(conn, owner)
        print(
            f"\ndrain: coordinator exited {took:.1f}s after SIGTERM (code {code}); agents "
            f"opened streams {reconnected} times; {RUNS} runs succeeded, outputs whole"
        )
    finally:
        await conn.close()


async def _check(conn: asyncpg.Connection, owner: str) -> None:
    statuses = await conn.fetch(
        "SELECT status, count(*) FROM runs WHERE owner_id = $1 GROUP BY status", owner
    )
    assert dict(statuses) == {"succeeded": RUNS}, statuses
    rows = await conn.fetch(
        "SELECT e.run_id, e.sequence, e.type, e.attempt_id, e.payload, r.event_sequence "
        "FROM run_events e JOIN runs r ON r.id = e.run_id WHERE r.owner_id = $1 "
        "ORDER BY e.run_id, e.sequence",
        owner,
    )
    by_run: dict[str, list[asyncpg.Record]] = {}
    for row in rows:
        by_run.setdefault(row["run_id"], []).append(row)
    assert len(by_run) == RUNS
    for run_id, events in by_run.items():
        sequences = [e["sequence"] for e in events]
        assert sequences == list(range(1, events[0]["event_sequence"] + 1)), (run_id, sequences)
        payloads = [json.loads(e["payload"]) for e in events]
        # output chunks are in the output store, not the log: the runtime seqs the log
        # applied only rise, and the attempt's last seq is the last event's. A runtime that
        # resends an event whose ack the drain cut off gets it recorded as ignored
        # (attempt.late_callback_ignored), never applied twice: its seq is not past the last.
        applied: list[int] = []
        for event, payload in zip(events, payloads, strict=True):
            if "seq" not in payload:
                continue
            if event["type"] == "attempt.late_callback_ignored":
                assert payload["seq"] <= payload["last_event_seq"], (run_id, payload)
                continue
            applied.append(payload["seq"])
        assert applied == sorted(set(applied)), (run_id, applied)
        runtime_seqs = applied
        pieces = await conn.fetch(
            "SELECT o.text, a.last_event_seq FROM attempt_output o "
            "JOIN attempts a ON a.id = o.attempt_id WHERE a.run_id = $1 ORDER BY o.byte_offset",
            run_id,
        )
        output = "".join(piece["text"] for piece in pieces)
        assert output == EXPECTED_OUTPUT, (run_id, output)
        assert pieces[0]["last_event_seq"] == runtime_seqs[-1], (run_id, runtime_seqs)
        types = [e["type"] for e in events]
        for once in ("attempt.accepted", "attempt.running", "attempt.succeeded", "run.succeeded"):
            assert types.count(once) == 1, (run_id, types)
        unanswered = [p for p in payloads if p.get("reason") == "start_unanswered"]
        assert not unanswered, (run_id, types)
