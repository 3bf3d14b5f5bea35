"""examples/long_task_agent.py, the SDK's programmatic example, as a real process against a
live coordinator (SQLite) and a real HTTP receiver on loopback: the POST goes out once, after
its intent, with the step's idempotency key, and the receiver's answer is the receipt; a
receiver that fails leaves the step uncertain, never re-sent."""

from __future__ import annotations

import asyncio
import http.server
import json
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from truerun.v1 import runtime_service_pb2 as rpb

from longtasks.domain.model import StepDraft
from longtasks.domain.states import SideEffect, StepState, TaskState
from longtasks.service.inputs import NewCriterion, NewTask
from tests.support.longtask_runtime import RuntimeSide, attempt_env, runtime_side
from tests.support.longtasks import ANA, SCHEDULER
from tests.support.scripted_runtime import ScriptedRuntime

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "long_task_agent.py"
OWNER = "ana"


class _Receiver(http.server.BaseHTTPRequestHandler):
    posts: ClassVar[list[tuple[str, dict[str, object]]]] = []
    status: ClassVar[int] = 201

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.posts.append((self.headers.get("Idempotency-Key", ""), body))
        answer = json.dumps({"id": f"msg-{len(self.posts)}", "at_ms": 1_700_000_000_000}).encode()
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[str]:
    _Receiver.posts.clear()
    _Receiver.status = 201
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[RuntimeSide]:
    async with runtime_side(f"sqlite:///{tmp_path / 'truerun.db'}") as live:
        yield live


async def _run_example(stack: RuntimeSide, task_id: str, webhook: str, cwd: Path) -> int:
    new = NewTask(
        project_id="proj",
        owner_id=OWNER,
        goal="tell the team the report is out",
        task_id=task_id,
        steps=(StepDraft("notify", "notify the team", SideEffect.NON_IDEMPOTENT, "notify-42"),),
        criteria=(NewCriterion("c1", "a command says so", "command", json.dumps({"run": "true"})),),
    )
    created = await stack.door.create(new, ANA)
    queued = await stack.door.enqueue(created.task.id, created.task.state_version, ANA)
    await stack.door.start_attempt(created.task.id, SCHEDULER, queued.task.state_version)
    runtime = ScriptedRuntime(stack.runtime, owner=OWNER)
    try:
        await runtime.connect()
        await runtime.heartbeat(limit=1)
        start = (await runtime.expect("start")).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, rpb.RUNTIME_EVENT_TYPE_ACCEPTED)
        env = attempt_env(stack.address, start, EXAMPLE_WEBHOOK_URL=webhook)
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(EXAMPLE), cwd=cwd, env=env
        )
        return await asyncio.wait_for(process.wait(), 60)
    finally:
        await runtime.close()


async def test_the_example_posts_once_with_its_receipt(
    stack: RuntimeSide, webhook: str, tmp_path: Path
) -> None:
    assert await _run_example(stack, "lt-example", webhook, tmp_path) == 0
    assert _Receiver.posts == [("notify-42", {"text": "tell the team the report is out"})]
    view = await stack.reads.view("lt-example")
    assert view.task.state is TaskState.COMPLETED, view.task.state_reason
    (effect,) = view.effects_of("notify")
    assert effect.target == webhook and effect.idempotency_key == "notify-42"
    assert effect.receipt is not None and effect.receipt.external_id == "msg-1"
    assert effect.receipt.at_ms == 1_700_000_000_000


async def test_a_failed_post_leaves_the_step_uncertain(
    stack: RuntimeSide, webhook: str, tmp_path: Path
) -> None:
    _Receiver.status = 500
    assert await _run_example(stack, "lt-example-500", webhook, tmp_path) != 0
    assert len(_Receiver.posts) == 1  # the example never re-sends by itself
    view = await stack.reads.view("lt-example-500")
    assert view.steps[0].state is StepState.UNCERTAIN
    (effect,) = view.effects_of("notify")
    assert effect.receipt is None
