"""The long-task half of the fault harness: the public LongTaskService over the cluster's
authenticated channel, with a deadline on every call, and waits on what it answers. Points
are reached by observation only (the task's state, a step's intent and receipt as GetLongTask
shows them, the effect fixture's own record): the services carry no hooks."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format
from truerun.v1 import long_task_service_pb2 as pb
from truerun.v1 import long_task_service_pb2_grpc as pb_grpc

from tests.faults.harness import PROJECT

POLL_S = 0.05
TERMINAL = frozenset({"partial", "completed", "failed", "cancelled"})


def state(task: pb.LongTask) -> str:
    """The stored state's name as the domain spells it (``waiting_for_user``)."""
    return pb.LongTaskState.Name(task.state).removeprefix("LONG_TASK_STATE_").lower()


def step_state(step: pb.LongTaskStep) -> str:
    return pb.StepState.Name(step.state).removeprefix("STEP_STATE_").lower()


def step(task: pb.LongTask, step_id: str) -> pb.LongTaskStep:
    found = [s for s in task.steps if s.step_id == step_id]
    assert found, f"task {task.long_task_id} has no step {step_id}"
    return found[0]


def open_decisions(task: pb.LongTask) -> list[pb.Decision]:
    return [d for d in task.decisions if d.state == "open"]


@dataclass
class LongTasks:
    channel: grpc.Channel
    timeout_s: float = 10.0
    project_id: str = PROJECT
    stub: pb_grpc.LongTaskServiceStub = field(init=False)

    def __post_init__(self) -> None:
        self.stub = pb_grpc.LongTaskServiceStub(self.channel)

    def create(self, draft: Mapping[str, Any], start: bool = True) -> pb.LongTask:
        body = json_format.ParseDict({"projectId": self.project_id, **draft}, pb.LongTaskDraft())
        request = pb.CreateLongTaskRequest(long_task=body, start=start)
        return self.stub.CreateLongTask(request, timeout=self.timeout_s)

    def get(self, task_id: str) -> pb.LongTask:
        request = pb.GetLongTaskRequest(project_id=self.project_id, long_task_id=task_id)
        return self.stub.GetLongTask(request, timeout=self.timeout_s)

    def events(self, task_id: str) -> list[pb.LongTaskEvent]:
        request = pb.ListLongTaskEventsRequest(
            project_id=self.project_id, long_task_id=task_id, page_size=1000
        )
        return list(self.stub.ListLongTaskEvents(request, timeout=self.timeout_s).events)

    def start(self, task_id: str) -> pb.LongTask:
        """Start a planned task (StartLongTask with its etag as read now)."""
        task = self.get(task_id)
        request = pb.StartLongTaskRequest(
            project_id=self.project_id, long_task_id=task_id, etag=task.etag
        )
        return self.stub.StartLongTask(request, timeout=self.timeout_s)

    def answer(self, task_id: str, decision_id: str, answer: str, note: str = "") -> pb.LongTask:
        task = self.get(task_id)
        request = pb.AnswerDecisionRequest(
            project_id=self.project_id,
            long_task_id=task_id,
            decision_id=decision_id,
            etag=task.etag,
            answer=answer,
            note=note,
        )
        return self.stub.AnswerDecision(request, timeout=self.timeout_s)

    def list_all(self, active_only: bool = False) -> list[pb.LongTask]:
        """Every task of the project (page by page)."""
        found: list[pb.LongTask] = []
        token = ""
        while True:
            request = pb.ListLongTasksRequest(
                project_id=self.project_id, active_only=active_only, page_size=200, page_token=token
            )
            page = self.stub.ListLongTasks(request, timeout=self.timeout_s)
            found.extend(page.long_tasks)
            token = page.next_page_token
            if not token:
                return found

    def clear_recovery(self, task_id: str, note: str = "looked at it") -> pb.LongTask:
        task = self.get(task_id)
        request = pb.ClearRecoveryRequest(
            project_id=self.project_id, long_task_id=task_id, etag=task.etag, note=note
        )
        return self.stub.ClearRecovery(request, timeout=self.timeout_s)

    def cancel(self, task_id: str, note: str = "faults") -> pb.LongTask:
        task = self.get(task_id)
        request = pb.CancelLongTaskRequest(
            project_id=self.project_id, long_task_id=task_id, etag=task.etag, note=note
        )
        return self.stub.CancelLongTask(request, timeout=self.timeout_s)

    def wait(
        self,
        task_id: str,
        until: Callable[[pb.LongTask], bool],
        timeout_s: float,
        what: str,
        describe: Callable[[], str] = lambda: "",
    ) -> pb.LongTask:
        """Polls GetLongTask until ``until`` holds; fails naming ``what`` and the last state
        (a call that fails while a process is down is tried again until the deadline)."""
        deadline = time.monotonic() + timeout_s
        last: pb.LongTask | None = None
        while True:
            try:
                last = self.get(task_id)
                if until(last):
                    return last
            except grpc.RpcError as error:
                if error.code() not in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                ):
                    raise
            if time.monotonic() > deadline:
                seen = f"{state(last)} ({last.state_reason})" if last is not None else "nothing"
                raise AssertionError(f"{what}: not within {timeout_s}s; last {seen} {describe()}")
            time.sleep(POLL_S)

    def wait_state(
        self, task_id: str, states: str | frozenset[str], timeout_s: float = 60.0
    ) -> pb.LongTask:
        wanted = frozenset({states}) if isinstance(states, str) else states
        return self.wait(
            task_id, lambda t: state(t) in wanted, timeout_s, f"state in {sorted(wanted)}"
        )
