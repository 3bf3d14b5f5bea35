"""Short handles (``#3``, or ``3``) wherever `truerun task` takes a task: resolved to the
task's id here, by reading the project's tasks (ListLongTasks), before the command runs.

A handle is its owner's (docs/long-tasks.md "One action contract and short handles"): with
``--owner`` it is looked up among that owner's tasks; without, among every task the token
sees in the project, and it must name exactly one (two owners each with a ``#3``: the command
refuses and asks for ``--owner``, never picks one). `truerun task act` sends the handle
itself and the server resolves it."""

from __future__ import annotations

from truerun.v1 import long_task_service_pb2 as pb
from truerun.v1.long_task_service_pb2_grpc import LongTaskServiceStub as Stub

from longtasks.domain.actions import format_handle, parse_handle

PAGE = 200  # ListLongTasks' largest page


class HandleUnknown(Exception):
    """The handle names no task the caller sees (NOT_FOUND)."""


class HandleAmbiguous(Exception):
    """The handle is several owners' (INVALID_ARGUMENT: pass --owner)."""


def resolve(stub: Stub, timeout: float, project: str, owner: str, given: str) -> str:
    """The task id ``given`` names: ``given`` itself unless it is a handle."""
    number = parse_handle(given)
    if number is None:
        return given
    handle = format_handle(number)
    found: list[pb.LongTask] = []
    token = ""
    while True:
        ask = pb.ListLongTasksRequest(
            project_id=project, owner_id=owner, page_size=PAGE, page_token=token
        )
        page = stub.ListLongTasks(ask, timeout=timeout)
        found.extend(t for t in page.long_tasks if t.handle == handle)
        if not (token := page.next_page_token):
            break
    if not found:
        whose = f"of {owner}'s tasks " if owner else "task "
        raise HandleUnknown(f"no {whose}in project {project} has the handle {handle}")
    if len(found) > 1:
        owners = ", ".join(sorted({t.owner_id for t in found}))
        raise HandleAmbiguous(f"{handle} is a handle of several owners ({owners}): pass --owner")
    return str(found[0].long_task_id)
