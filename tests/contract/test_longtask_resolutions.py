"""A person's resolution of recovery_required through the door, on SQLite and PostgreSQL
(docs/long-tasks.md "Resolving recovery_required"; longtasks/domain/resolutions.py): "Done,
skip" skips the failed step on the person's word (no evidence recorded), "Not done, retry"
sends it back to pending with the old try's record cleared and the next attempt runs it, a
skip with no stopped step is refused with nothing written."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kernel.errors import InvalidLongTaskTransition, LongTaskVersionConflict
from longtasks.domain.model import StepDraft
from longtasks.domain.resolutions import Resolution
from longtasks.domain.states import Basis, SideEffect, StepState, TaskState
from longtasks.service.inputs import Changed, Intent, NewEvidence, ReceiptIn
from services.bootstrap import open_store
from tests.support.clock import Clock
from tests.support.longtasks import ANA, SCHEDULER, Harness, harness, new_task, running, snapshot

T, S = TaskState, StepState


@pytest.fixture
async def h(migrated_database_url: str) -> AsyncIterator[Harness]:
    store = await open_store(migrated_database_url)
    yield harness(store, Clock())
    await store.close()


async def stopped_at_a_failed_send(h: Harness) -> Changed:
    """s1 done with evidence; s2 (non_idempotent) intent, receipt, then failed: the attempt
    ends and the task is in recovery_required."""
    attempt = (await running(h)).made
    assert attempt is not None
    d = h.door
    await d.begin_step("lt-1", attempt, "s1", 1)
    await d.complete_step("lt-1", attempt, "s1", 2, [NewEvidence("f", "a://1", "report")])
    await d.begin_step("lt-1", attempt, "s2", 1)
    await d.record_intent("lt-1", attempt, "s2", 2, Intent("mail:boss", "the report"))
    await d.record_receipt("lt-1", attempt, "s2", 3, ReceiptIn("mail:boss", 1, "550", "m-1"))
    await d.fail_step("lt-1", attempt, "s2", 4, "the mail bounced")
    ended = await d.attempt_ended("lt-1", attempt, "run failed")
    assert ended.task.state is T.RECOVERY_REQUIRED
    return ended


async def steps(h: Harness) -> dict[str, tuple[StepState, Basis | None, str | None]]:
    return {s.step_id: (s.state, s.basis, s.intent_id) for s in await h.sql.steps(None, "lt-1", 1)}


async def test_done_skip_skips_the_stopped_step_on_the_persons_word(h: Harness) -> None:
    ended = await stopped_at_a_failed_send(h)
    evidence = len(await h.sql.evidence(None, "lt-1"))
    v = ended.task.state_version
    cleared = await h.door.clear_recovery("lt-1", v, ANA, "it was sent", Resolution.SKIP)
    assert cleared.task.state is T.QUEUED
    got = await steps(h)
    assert got["s2"][:2] == (S.SKIPPED, Basis.USER)
    assert got["s1"][0] is S.COMPLETED and got["s3"][0] is S.PENDING
    assert len(await h.sql.evidence(None, "lt-1")) == evidence  # no runtime evidence made up
    events = [(e.type, e.message) for e in await h.sql.events("lt-1")]
    assert any(t == "recovery_resolved" and "skip by ana" in m for t, m in events), events
    # the next attempt goes on after it
    second = await h.door.start_attempt("lt-1", SCHEDULER, cleared.task.state_version)
    assert second.made is not None
    began = await h.door.begin_step("lt-1", second.made, "s3", 1)
    assert began.step is not None and began.step.state is S.RUNNING


async def test_not_done_retry_sends_the_step_back_to_pending_for_the_next_attempt(
    h: Harness,
) -> None:
    ended = await stopped_at_a_failed_send(h)
    v = ended.task.state_version
    cleared = await h.door.clear_recovery("lt-1", v, ANA, "not sent", Resolution.RETRY)
    assert cleared.task.state is T.QUEUED
    assert (await steps(h))["s2"] == (S.PENDING, Basis.USER, None)  # the old intent is gone
    second = await h.door.start_attempt("lt-1", SCHEDULER, cleared.task.state_version)
    assert second.made is not None
    [s2] = [s for s in await h.sql.steps(None, "lt-1", 1) if s.step_id == "s2"]
    began = await h.door.begin_step("lt-1", second.made, "s2", s2.version)
    assert began.step is not None and began.step.state is S.RUNNING


async def test_go_on_leaves_the_step_and_a_stale_etag_changes_nothing(h: Harness) -> None:
    ended = await stopped_at_a_failed_send(h)
    before = await snapshot(h.store)
    with pytest.raises(LongTaskVersionConflict):
        await h.door.clear_recovery("lt-1", ended.task.state_version - 1, ANA, "", Resolution.SKIP)
    assert await snapshot(h.store) == before
    cleared = await h.door.clear_recovery("lt-1", ended.task.state_version, ANA, "looked")
    assert cleared.task.state is T.QUEUED and (await steps(h))["s2"][0] is S.FAILED


async def test_an_interrupted_verification_has_nothing_to_skip_but_retries(h: Harness) -> None:
    spec = new_task(steps=(StepDraft("s1", "write", SideEffect.PURE),), max_verify_interruptions=1)
    attempt = (await running(h, spec)).made
    assert attempt is not None
    await h.door.skip_step("lt-1", attempt, "s1", 1)
    await h.door.ready_for_verification("lt-1", attempt)
    ended = await h.door.attempt_ended("lt-1", attempt, "killed while verifying")
    assert ended.task.state is T.RECOVERY_REQUIRED
    before = await snapshot(h.store)
    with pytest.raises(InvalidLongTaskTransition) as refused:
        await h.door.clear_recovery("lt-1", ended.task.state_version, ANA, "", Resolution.SKIP)
    assert refused.value.metadata["refusal"] == "NO_STOPPED_STEP"
    assert await snapshot(h.store) == before
    again = await h.door.clear_recovery("lt-1", ended.task.state_version, ANA, "", Resolution.RETRY)
    assert again.task.state is T.QUEUED
