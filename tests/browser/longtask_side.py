"""The long tasks' two sides for the browser tests against a real ``truerun dev``: the people
API over REST (create, commands, reads), and the attempt side: the watcher's scheduler starts
an attempt, its run's Start reaches a scripted runtime on the real runtime protocol, and the
attempt talks to LongTaskAttemptService with that Start's callback token (the SDK,
``truerun_runtime.longtask.LongTaskAttempt``). Nothing here is a double of the server."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from truerun.v1 import runtime_service_pb2 as rpb

from tests.browser.dashboard import OWNER, PROJECT, Dashboard
from tests.support.scripted_runtime import ScriptedRuntime
from truerun_runtime.longtask import LongTaskAttempt

TASKS = f"/v1/projects/{PROJECT}/longTasks"
#: Commands a person means whatever the version (services/cli/task.py resends these too).
RESENT = frozenset({"start", "pause", "resume", "cancel"})


def draft(task_id: str, report: Path, *, steps: int = 3, **fields: Any) -> dict[str, Any]:
    """``steps`` pure steps and one required criterion: ``report`` exists (file_exists)."""
    return {
        "long_task_id": task_id,
        "owner_id": OWNER,
        "goal": f"weekly report {task_id}",
        "constraints": ["never email customers"],
        "steps": [
            {
                "step_id": f"s{i}",
                "title": f"part {i} of the report",
                "side_effect": "SIDE_EFFECT_CLASS_PURE",
            }
            for i in range(1, steps + 1)
        ],
        "criteria": [
            {
                "criterion_id": "exists",
                "text": "the report exists",
                "checker_kind": "file_exists",
                "checker": {"path": str(report)},
            }
        ],
        **fields,
    }


def effect_draft(task_id: str) -> dict[str, Any]:
    """One non-idempotent step (an email): an interruption after its intent is a person's
    question (the intent record is the material)."""
    return {
        "long_task_id": task_id,
        "owner_id": OWNER,
        "goal": f"email the team {task_id}",
        "steps": [
            {
                "step_id": "send",
                "title": "send the email",
                "side_effect": "SIDE_EFFECT_CLASS_NON_IDEMPOTENT",
            }
        ],
        "criteria": [{"criterion_id": "sent", "text": "the email was sent", "optional": True}],
    }


@dataclass
class People:
    dash: Dashboard

    async def create(self, body: dict[str, Any], start: bool = False) -> dict[str, Any]:
        async with self.dash.http() as client:
            got = await client.post(TASKS, content=json.dumps({**body, "start": start}))
        assert got.status_code == 201, got.text
        task: dict[str, Any] = got.json()
        return task

    async def get(self, task_id: str) -> dict[str, Any]:
        async with self.dash.http() as client:
            got = await client.get(f"{TASKS}/{task_id}")
        assert got.status_code == 200, got.text
        task: dict[str, Any] = got.json()
        return task

    async def command(self, task_id: str, verb: str, **body: Any) -> dict[str, Any]:
        """``verb`` at the task's current version. The scheduler may start a queued task
        between the read and the send; for start, pause, resume and cancel (a person's
        wish whatever the version) the read is made again and the command resent, as
        ``truerun task`` does; never for an answer."""
        for _ in range(3):
            task = await self.get(task_id)
            async with self.dash.http() as client:
                got = await client.post(
                    f"{TASKS}/{task_id}:{verb}", content=json.dumps({"etag": task["etag"], **body})
                )
            moved = got.status_code == 409 and "LONG_TASK_VERSION_CONFLICT" in got.text
            if not (moved and verb in RESENT):
                break
        assert got.status_code == 200, got.text
        after: dict[str, Any] = got.json()
        return after


@dataclass
class Attempts:
    """Starts as the scheduler dispatches them, accepted by one scripted runtime."""

    dash: Dashboard
    runtime: ScriptedRuntime
    active: list[str]
    pending: dict[str, rpb.Start] = field(default_factory=dict)

    async def start_of(self, task_id: str) -> rpb.Start:
        while task_id not in self.pending:
            start = (await self.runtime.expect("start", timeout=30)).start
            spec = json_format.MessageToDict(start.spec)
            self.pending[spec["long_task"]["id"]] = start
        return self.pending.pop(task_id)

    async def attempt(self, task_id: str) -> tuple[LongTaskAttempt, rpb.Start]:
        """The task's next attempt, accepted and running; the SDK opened on its token."""
        start = await self.start_of(task_id)
        await self.runtime.answer_start(start, accepted=True)
        await self.runtime.event(start, 1, rpb.RUNTIME_EVENT_TYPE_ACCEPTED)
        await self.runtime.event(start, 2, rpb.RUNTIME_EVENT_TYPE_RUNNING)
        await self.runtime.acked(start.attempt_id, 2)
        self.active.append(start.runtime_task_id)
        sdk = LongTaskAttempt(
            self.dash.server.address,
            start.run_id,
            start.attempt_id,
            start.callback_token,
            renew_every_s=1.0,
        )
        await sdk.open()
        await sdk.briefing()
        return sdk, start

    async def run_ends(self, start: rpb.Start, seq: int = 3) -> None:
        """The attempt's process died (its run failed): the watcher ends the attempt."""
        await self.runtime.event(start, seq, rpb.RUNTIME_EVENT_TYPE_FAILED, exit_code=1)
        await self.runtime.acked(start.attempt_id, seq)
        if start.runtime_task_id in self.active:
            self.active.remove(start.runtime_task_id)


async def settle(coroutine: Any) -> None:
    """Let a background call (an approval the SDK waits on) finish or fail visibly."""
    await asyncio.wait_for(coroutine, 30)
