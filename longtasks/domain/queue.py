"""The owner's queue (seed C "预算、并发与配额"), as pure functions over task records: which
queued tasks the scheduler may start now, the position each queued task shows ("排队中 ·
前面还有 N 个"), and the unfinished-task cap a new task is refused by.

- **Concurrency**: an owner's tasks in ``running``, ``verifying`` and
  ``waiting_for_approval`` (``TaskState.leased``) take one slot each. The seed names only
  running and verifying; a task waiting for an approval is counted too because its attempt
  stays alive (it holds the lease, its run and the runtime's slot), and a grant moves it
  back to ``running`` without asking the scheduler, so not counting it would let a grant
  push the owner past the cap.
- **Order**: queued tasks take free slots in creation order (``created_at_ms``, then id),
  per owner; a task queued again after an attempt keeps its place by creation.
- **Unfinished cap**: an owner may keep at most N tasks that are not terminal; the API asks
  ``unfinished_cap_refusal`` before ``create``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from longtasks.domain.model import Task
from longtasks.domain.states import TaskState


def queue_order(task: Task) -> tuple[int, str]:
    """Creation order: older first, the id breaking a tie (ids are time-ordered uuid7s)."""
    return (task.created_at_ms, task.id)


def queue_positions(tasks: Iterable[Task]) -> dict[str, int]:
    """Every queued task's place in its owner's queue: how many of the owner's queued
    tasks come before it (0: it is next). Tasks in any other state are left out."""
    by_owner: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        if task.state is TaskState.QUEUED:
            by_owner[task.owner_id].append(task)
    positions: dict[str, int] = {}
    for queued in by_owner.values():
        for position, task in enumerate(sorted(queued, key=queue_order)):
            positions[task.id] = position
    return positions


def slots_taken(tasks: Iterable[Task]) -> Counter[str]:
    """Per owner, how many of its tasks hold a concurrency slot (``TaskState.leased``)."""
    return Counter(task.owner_id for task in tasks if task.state.leased)


def free_slots(taken: int, cap: int) -> int:
    """How many more of an owner's tasks may start (never negative: an owner past its cap,
    after the cap was lowered, starts nothing until enough of its tasks stop)."""
    return max(0, cap - taken)


def starts_this_round(
    queued: Sequence[Task], taken: Mapping[str, int], cap: int
) -> list[list[Task]]:
    """The queued tasks to try, per owner, in creation order: each owner's list holds its
    queue in order, and the scheduler starts from the front until its free slots are used
    (a task it cannot start yet, its last attempt still open, gives its turn to the next).
    Owners with no free slot are left out; owners come in the order of their oldest task."""
    by_owner: dict[str, list[Task]] = defaultdict(list)
    for task in sorted(queued, key=queue_order):
        if task.state is TaskState.QUEUED:
            by_owner[task.owner_id].append(task)
    return [tasks for owner, tasks in by_owner.items() if free_slots(taken.get(owner, 0), cap) > 0]


def unfinished_cap_refusal(count: int, cap: int) -> str | None:
    """Why an owner with ``count`` unfinished (not terminal) tasks may not create another
    under ``cap`` (TRUERUN_LONG_TASK_OWNER_MAX_UNFINISHED); None: it may. The create RPC
    calls it with the owner's count before ``LongTaskDoor.create`` and refuses with the
    sentence (0 = no cap)."""
    if cap <= 0 or count < cap:
        return None
    return (
        f"the owner has {count} unfinished long tasks, the most allowed is {cap}: "
        "finish, cancel or wait for some first"
    )
