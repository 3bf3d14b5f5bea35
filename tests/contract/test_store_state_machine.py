"""Random command sequences against the real stores, checking the invariants after every step.

Runs on SQLite and PostgreSQL. Some steps send two commands at once (asyncio.gather), which on
both backends really race: PostgreSQL through its row locks, SQLite through its writer thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from coordinator.domain import commands as c
from coordinator.domain.model import Attempt, Run
from coordinator.service.transitions import Transitions
from coordinator.store.base import RunFilter
from kernel.db.schema import metadata
from kernel.errors import DomainError, IdempotencyKeyReused
from services.bootstrap import open_store
from tests.support.factories import RUNTIME, SCHEDULER, USER, spec

RUNTIME_KINDS: list[type[c.RuntimeCommand]] = [
    c.DispatchRejected,
    c.RuntimeAccepted,
    c.RuntimeRunning,
    c.RuntimeResult,
    c.RuntimeNote,
    c.CancelConfirmed,
]


@dataclass
class Seen:
    run: Run
    attempts: dict[str, Attempt] = field(default_factory=dict)
    events: int = 0


def run_command(kind: str, run: Run, version: int | None) -> c.RunCommand:
    if kind == "claim":
        return c.Claim(run.id, SCHEDULER, version, runtime_instance_id="inst")
    if kind == "release":
        return c.ReleaseBeforeFence(run.id, SCHEDULER, version)
    if kind == "fence":
        return c.StartFence(run.id, SCHEDULER, version, callback_token_hash="h")
    if kind == "unknown":
        return c.DispatchUnknown(run.id, SCHEDULER, version)
    if kind == "cancel":
        return c.RequestCancel(run.id, USER, version)
    if kind == "lost":
        return c.MarkLost(run.id, SCHEDULER, version)
    if kind == "retry":
        return c.RetryAttempt(run.id, SCHEDULER, version)
    if kind == "manual_retry":
        return c.ManualRetry(run.id, USER, version)
    return c.Approve(run.id, USER, version)


RUN_KINDS = [
    "claim",
    "release",
    "fence",
    "unknown",
    "cancel",
    "lost",
    "retry",
    "manual_retry",
    "approve",
]


class StoreMachine(RuleBasedStateMachine):
    database_url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = self.loop.run_until_complete(open_store(self.database_url))
        self.transitions = Transitions(self.store)
        self.seen: dict[str, Seen] = {}

    def teardown(self) -> None:
        self.loop.run_until_complete(self.store.close())
        self.loop.close()

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def _try(self, *commands: c.RunCommand | c.RuntimeCommand) -> None:
        async def attempt(command: c.RunCommand | c.RuntimeCommand) -> None:
            try:
                await self.transitions.execute(command)
            except DomainError:
                pass  # rejections are answers; the invariants check that nothing changed

        async def together() -> None:
            await asyncio.gather(*(attempt(cmd) for cmd in commands))

        self._run(together())

    @initialize()
    def clean(self) -> None:
        async def wipe() -> None:
            import sqlite3

            import asyncpg

            tables = [t.name for t in reversed(metadata.sorted_tables)]
            if self.database_url.startswith("sqlite:///"):
                conn = sqlite3.connect(self.database_url.removeprefix("sqlite:///"))
                conn.execute("PRAGMA foreign_keys=OFF")
                for table in tables:
                    conn.execute(f"DELETE FROM {table}")
                conn.commit()
                conn.close()
            else:
                pg = await asyncpg.connect(self.database_url)
                await pg.execute(f"TRUNCATE {', '.join(tables)}")
                await pg.close()

        self._run(wipe())

    @rule(approval=st.booleans(), attempts=st.integers(1, 3), key=st.sampled_from(["", "a", "b"]))
    def create(self, approval: bool, attempts: int, key: str) -> None:
        # A key reused for a different request is refused and writes nothing
        # (docs/state-model.md "6a"); the invariants then hold over what was written.
        with contextlib.suppress(IdempotencyKeyReused):
            self._run(
                self.transitions.create(
                    spec(
                        requires_approval=approval,
                        max_attempts=attempts,
                        idempotency_key=key or None,
                    )
                )
            )

    @precondition(lambda self: bool(self.seen))
    @rule(data=st.data(), kind=st.sampled_from(RUN_KINDS), stale=st.integers(-1, 1))
    def run_cmd(self, data: st.DataObject, kind: str, stale: int) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.seen)))
        current = self.seen[run_id].run
        version = None if stale == 0 else current.version + (0 if stale > 0 else -1)
        self._try(run_command(kind, current, version))

    def _runtime(self, data: st.DataObject) -> c.RuntimeCommand | None:
        # Every value is drawn whatever the stores answered: which attempts exist depends on
        # who won a race, and hypothesis can replay (and shrink) a sequence of choices only
        # if their shape never depends on such outside state.
        pick = data.draw(st.integers(0, 2**16))
        kind = data.draw(st.sampled_from(RUNTIME_KINDS))
        step = data.draw(st.sampled_from([-1, 0, 1, 1, 2]))
        outcome = data.draw(st.sampled_from(list(c.RuntimeOutcome)))
        exit_code = data.draw(st.sampled_from([0, 1, None]))
        candidates = [a for s in self.seen.values() for a in s.attempts.values()]
        if not candidates:
            return None
        attempt = sorted(candidates, key=lambda a: a.id)[pick % len(candidates)]
        extra: dict[str, Any] = {}
        if kind is c.RuntimeResult:
            extra = {"outcome": outcome, "exit_code": exit_code}
        seq = attempt.last_event_seq + step
        return kind(attempt.run_id, attempt.id, attempt.runtime_task_id, seq, RUNTIME, **extra)

    @precondition(lambda self: bool(self.seen))
    @rule(data=st.data())
    def runtime_cmd(self, data: st.DataObject) -> None:
        command = self._runtime(data)
        if command is not None:
            self._try(command)

    @precondition(lambda self: bool(self.seen))
    @rule(data=st.data(), kind=st.sampled_from(RUN_KINDS))
    def race(self, data: st.DataObject, kind: str) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.seen)))
        first = run_command(kind, self.seen[run_id].run, None)
        second = self._runtime(data) or run_command("cancel", self.seen[run_id].run, None)
        self._try(first, second)

    @invariant()
    def invariants_hold(self) -> None:
        loaded = self._run(self.store.list_runs(RunFilter(), None, 10_000))
        for item in loaded:
            run = item.run
            events = self._run(self.store.list_events(run.id, 0, 100_000))
            attempts = self._run(self.store.list_attempts(run.id))
            assert [e.sequence for e in events] == list(range(1, len(events) + 1))
            assert run.event_sequence == len(events)
            assert all(e.actor.type for e in events)
            assert sum(not a.status.terminal for a in attempts) <= 1
            before = self.seen.get(run.id)
            if before is not None:
                old = before.run
                assert run.version >= old.version
                new_events = events[before.events :]
                if old.status.terminal:
                    assert run == old or (
                        run.version == old.version and run.event_sequence > old.event_sequence
                    ), "a terminal run changed"
                if run.version > old.version:
                    assert new_events or _output_chunk_only(before, run, attempts), (
                        "a state change without its event"
                    )
                else:
                    assert all(e.type == "attempt.late_callback_ignored" for e in new_events), (
                        "an event without its state change"
                    )
                    assert (run.status, run.current_attempt_id) == (
                        old.status,
                        old.current_attempt_id,
                    )
                for attempt in attempts:
                    prior = before.attempts.get(attempt.id)
                    if prior is not None and prior.status.terminal:
                        assert attempt == prior, "a terminal attempt changed"
            self.seen[run.id] = Seen(run, {a.id: a for a in attempts}, len(events))


def _output_chunk_only(before: Seen, run: Run, attempts: list[Attempt]) -> bool:
    """An output chunk is evidence with no event of its own (docs/state-model.md, "runtime
    note"): it moves the current attempt's seq and output columns and nothing else."""
    old = before.run
    if (run.status, run.current_attempt_id, run.event_sequence) != (
        old.status,
        old.current_attempt_id,
        old.event_sequence,
    ):
        return False
    for attempt in attempts:
        prior = before.attempts.get(attempt.id)
        if prior is None:
            return False
        if attempt.id != run.current_attempt_id:
            if attempt != prior:
                return False
        elif attempt.status != prior.status or attempt.last_event_seq <= prior.last_event_seq:
            return False
    return True


@pytest.mark.slow
def test_random_command_sequences(migrated_database_url: str) -> None:
    StoreMachine.database_url = migrated_database_url
    run_state_machine_as_test(  # type: ignore[no-untyped-call]
        StoreMachine,
        settings=settings(
            max_examples=25,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
