"""The owner's queue and the attempt's liveness as pure rules (longtasks/domain/queue.py,
liveness.py): queue positions per owner in creation order, who may start this round, the
unfinished-task cap, and which run statuses end an attempt."""

from __future__ import annotations

from dataclasses import replace

from coordinator.domain.states import RunStatus
from longtasks.domain.liveness import OpenAttempt, ended_reason, run_ended
from longtasks.domain.model import Budget, Task
from longtasks.domain.queue import (
    free_slots,
    queue_positions,
    slots_taken,
    starts_this_round,
    unfinished_cap_refusal,
)
from longtasks.domain.states import TaskState

T = TaskState


def task(task_id: str, state: TaskState = T.QUEUED, owner: str = "ana", at: int = 0) -> Task:
    return Task(task_id, "proj", owner, "goal", state, 1, 1, Budget(3), created_at_ms=at)


def test_queue_positions_count_the_owners_queued_tasks_ahead_in_creation_order() -> None:
    tasks = [
        task("c", at=30),
        task("a", at=10),
        task("b", at=10),  # same ms: the id decides
        task("r", T.RUNNING, at=1),
        task("p", T.PAUSED, at=2),
        task("x", owner="bo", at=50),
    ]
    assert queue_positions(tasks) == {"a": 0, "b": 1, "c": 2, "x": 0}
    assert queue_positions([]) == {}


def test_slots_are_taken_by_running_verifying_and_waiting_for_approval_only() -> None:
    states = [T.RUNNING, T.VERIFYING, T.WAITING_FOR_APPROVAL, T.WAITING_FOR_USER, T.QUEUED]
    states += [T.PAUSED, T.RECOVERY_REQUIRED, T.PLANNED, T.COMPLETED]
    taken = slots_taken([task(str(n), s) for n, s in enumerate(states)])
    assert taken == {"ana": 3}
    assert [free_slots(n, 4) for n in (0, 3, 4, 6)] == [4, 1, 0, 0]


def test_only_owners_with_a_free_slot_start_and_each_in_creation_order() -> None:
    queued = [task("a2", at=2), task("a1", at=1), task("b1", owner="bo", at=0)]
    queued.append(replace(task("gone", T.RUNNING), created_at_ms=-1))  # not queued: left out
    assert [[t.id for t in q] for q in starts_this_round(queued, {}, 2)] == [["b1"], ["a1", "a2"]]
    assert [[t.id for t in q] for q in starts_this_round(queued, {"ana": 2}, 2)] == [["b1"]]
    assert starts_this_round(queued, {"ana": 5, "bo": 2}, 2) == []


def test_the_unfinished_cap_refuses_at_the_cap_and_says_so() -> None:
    assert unfinished_cap_refusal(99, 100) is None
    refusal = unfinished_cap_refusal(100, 100)
    assert refusal is not None and "100 unfinished" in refusal
    assert unfinished_cap_refusal(10_000, 0) is None  # 0: no cap


def test_an_attempt_ends_only_with_a_run_that_can_no_longer_work_on_it() -> None:
    ended = {s for s in RunStatus if run_ended(s.value)}
    assert ended == {
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.TIMED_OUT,
        RunStatus.LOST,
        RunStatus.DEAD_LETTER,
    }
    # an unknown run is dispatching or running with a stale sync: never ended
    assert not run_ended("dispatching") and not run_ended("running")


def test_the_reason_names_the_status_and_each_reason_once() -> None:
    assert ended_reason("failed", "exit_1", None, "", "failed", "exit_1") == (
        "its run ended failed: exit_1"
    )
    assert ended_reason("succeeded") == "its run ended succeeded"
    attempt = OpenAttempt("lt-1", "a-1", "r-1", "lost", ("worker_lost",))
    assert attempt.run_ended and attempt.ended_reason() == "its run ended lost: worker_lost"
    assert len(ended_reason("failed", "x" * 5000)) == 1024
