"""Small builders for commands, actors and specs used across tests."""

from __future__ import annotations

from typing import Any

from coordinator.domain import commands as c
from coordinator.domain.model import Actor, Attempt
from coordinator.domain.states import ActorType
from coordinator.service.transitions import Result, Transitions

USER = Actor(ActorType.USER, "alice")
SCHEDULER = Actor(ActorType.SCHEDULER, "capacity")
RUNTIME = Actor(ActorType.RUNTIME, "runtime-1")


def spec(**overrides: Any) -> c.RunSpec:
    values: dict[str, Any] = {
        "project_id": "proj",
        "owner_id": "alice",
        "task_id": "task",
        "created_by": USER,
    }
    values.update(overrides)
    return c.RunSpec(**values)


async def started(transitions: Transitions, **overrides: Any) -> tuple[Result, Attempt]:
    """A run whose attempt is past the start fence (claimed, fenced)."""
    created = await transitions.create(spec(**overrides))
    run_id = created.run.id
    await transitions.execute(c.Claim(run_id, SCHEDULER, runtime_instance_id="inst-1"))
    fenced = await transitions.execute(c.StartFence(run_id, SCHEDULER, callback_token_hash="h"))
    assert fenced.attempt is not None
    return fenced, fenced.attempt


def evidence(
    kind: type[c.RuntimeCommand], attempt: Attempt, seq: int, **extra: Any
) -> c.RuntimeCommand:
    return kind(
        run_id=attempt.run_id,
        attempt_id=attempt.id,
        runtime_task_id=attempt.runtime_task_id,
        seq=seq,
        actor=RUNTIME,
        **extra,
    )
