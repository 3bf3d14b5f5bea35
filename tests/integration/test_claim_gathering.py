"""TRUERUN_CLAIM_GATHER_MS: after a claim round that took some runs (not a full round), the
dispatcher waits before the next, so the runs created meanwhile go out in one round; a run
created while the dispatcher is idle is claimed at once. Made long here (2 s) so that both
sides show without depending on the host's speed: the bound asserted follows from the wait
itself."""

from __future__ import annotations

import time

from truerun.v1 import run_service_pb2 as rs

from tests.support.runtime_stack import runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime

GATHER_MS = 2_000


async def test_an_idle_dispatcher_claims_at_once_and_a_busy_one_gathers(
    migrated_database_url: str,
) -> None:
    async with runtime_stack(migrated_database_url, claim_gather_ms=GATHER_MS) as stack:
        runtime = ScriptedRuntime(stack.runtime)
        await runtime.connect()
        try:
            await runtime.heartbeat(limit=5)

            async def create(task: str) -> str:
                request = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id=task)
                return str((await stack.runs.CreateRun(request)).run.id)

            created = time.monotonic()
            first = await create("first")
            start = (await runtime.expect("start")).start
            first_started = time.monotonic()
            assert start.run_id == first
            # Idle: claimed on the create's wake-up, well inside the gathering wait.
            assert first_started - created < GATHER_MS / 1000 * 0.75

            second = await create("second")  # while the dispatcher waits after that round
            start = (await runtime.expect("start")).start
            assert start.run_id == second
            assert time.monotonic() - first_started >= GATHER_MS / 1000 * 0.75
        finally:
            await runtime.close()
