"""TRUERUN_CLAIM_GATHER_MS: after a claim round that took some runs (not a full round) and
ran the queue dry, the dispatcher waits before the next, so the runs created meanwhile go
out in one round; a run created while the dispatcher is idle is claimed at once, and a round
held back by the runtime's capacity is followed by no wait. Made long here (2 s) so that
every side shows without depending on the host's speed: the bound asserted follows from the
wait itself."""

from __future__ import annotations

import time

from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from capacity.service.claims import Blocked
from coordinator.dispatch.capacity_port import QUEUE_DRAINED
from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime

GATHER_MS = 2_000


async def _create(stack: Stack, task: str) -> str:
    request = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id=task)
    return str((await stack.runs.CreateRun(request)).run.id)


async def test_an_idle_dispatcher_claims_at_once_and_a_busy_one_gathers(
    migrated_database_url: str,
) -> None:
    async with runtime_stack(migrated_database_url, claim_gather_ms=GATHER_MS) as stack:
        runtime = ScriptedRuntime(stack.runtime)
        await runtime.connect()
        try:
            await runtime.heartbeat(limit=5)

            created = time.monotonic()
            first = await _create(stack, "first")
            start = (await runtime.expect("start")).start
            first_started = time.monotonic()
            assert start.run_id == first
            # Idle: claimed on the create's wake-up, well inside the gathering wait.
            assert first_started - created < GATHER_MS / 1000 * 0.75

            second = await _create(stack, "second")  # while the dispatcher waits after that round
            start = (await runtime.expect("start")).start
            assert start.run_id == second
            assert time.monotonic() - first_started >= GATHER_MS / 1000 * 0.75
        finally:
            await runtime.close()


async def test_a_round_held_back_by_capacity_does_not_gather(migrated_database_url: str) -> None:
    """A round that stopped at the runtime's capacity (D = 1), not at an empty queue, is
    not followed by the gathering wait: when its run ends, the next queued run is claimed at
    once. (With the wait, a runtime of small D would start one attempt per wait.)"""
    async with runtime_stack(migrated_database_url, claim_gather_ms=GATHER_MS) as stack:
        first, second = await _create(stack, "first"), await _create(stack, "second")
        runtime = ScriptedRuntime(stack.runtime)
        await runtime.connect()
        try:
            await runtime.heartbeat(limit=1)
            start = (await runtime.expect("start")).start
            assert start.run_id == first  # the older run; D = 1 holds the other back
            await runtime.answer_start(start, accepted=True)
            await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
            await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
            await runtime.acked(start.attempt_id, 2)
            ended = time.monotonic()
            start = (await runtime.expect("start")).start
            assert start.run_id == second
            assert time.monotonic() - ended < GATHER_MS / 1000 * 0.75
        finally:
            await runtime.close()


def test_the_dispatchers_drained_reason_is_the_capacity_services() -> None:
    """The dispatcher tells a drained queue from a full runtime by the capacity service's
    block reason, a string across the gRPC port: both sides must spell it alike."""
    assert QUEUE_DRAINED == Blocked.NOTHING_ELIGIBLE.value
