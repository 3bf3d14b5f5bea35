"""`truerun task create | ls | show | answer | start | pause | resume | cancel | clear-recovery |
continue | later | events | export | act`: long tasks (LongTaskService, docs/long-tasks.md) from the
command line. ``act`` is the one action contract: a task by id or short handle (``#3``),
exactly once per ``--action-id`` (default: a new one per invocation).

``create --file task.yaml`` sends a request (services/cli/task_file.py): truerun never reads
the file back as state. Every command that changes a task reads it first and sends the etag
it read, so a change made meanwhile by someone else is refused, not overwritten (start, pause,
resume and cancel, which carry nothing chosen from what was read, read again and resend when
only the version moved under them, e.g. the scheduler started the task). Times are
shown in local time. Every command takes ``-o json|yaml``: the response as protobuf JSON
(or YAML). Every command that names a task takes its id or its short handle (``#3``,
services/cli/task_handles.py).

Exit status (services/cli/errors.py): 0 done; 2 it could not be done, said in one line on
stderr with the error's code and reason: a bad file or flag here, a refusal by the server
(INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, ABORTED, UNAUTHENTICATED, ...) or a
server that cannot be reached.
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import Message
from truerun.v1 import long_task_service_pb2 as pb
from truerun.v1.long_task_service_pb2_grpc import LongTaskServiceStub as Stub

from coordinator.api.errors import reason_of
from services.cli import task_handles, task_later
from services.cli.client import Client, fail
from services.cli.errors import say
from services.cli.output import add_output_flag, emit
from services.cli.schedule import _OneLineParser
from services.cli.task_file import RequestFileError, draft, load, plan
from services.cli.task_view import (
    TERMINAL,
    created_text,
    describe,
    event_line,
    ls_text,
    moved_text,
)

RECENT_SHOWN = 10
#: command -> (the RPC, its request, the past tense shown).
_MOVES: dict[str, tuple[str, Callable[..., Message], str]] = {
    "start": ("StartLongTask", pb.StartLongTaskRequest, "started"),
    "pause": ("PauseLongTask", pb.PauseLongTaskRequest, "paused"),
    "resume": ("ResumeLongTask", pb.ResumeLongTaskRequest, "resumed"),
    "cancel": ("CancelLongTask", pb.CancelLongTaskRequest, "cancelled"),
    "clear-recovery": ("ClearRecovery", pb.ClearRecoveryRequest, "recovery cleared"),
}
Shown = tuple[Message, str]


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    client_flags: Callable[[argparse.ArgumentParser], None],
) -> None:
    """`truerun task ...`; ``client_flags`` adds --server and --token to each command."""
    top = sub.add_parser("task", help="long tasks: goals that span many attempts and days")
    commands = top.add_subparsers(dest="task_cmd", required=True, parser_class=_OneLineParser)

    def command(name: str, help_text: str, *, named: bool = True) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help_text, description=help_text)
        client_flags(p)
        add_output_flag(p, "the response")
        if named:
            p.add_argument("long_task_id", metavar="TASK", help="a task id, or a handle like #3")
            p.add_argument(
                "--owner",
                default="",
                help="whose handle TASK is (default: the one owner in the project who has it)",
            )
        default = "the file's, else default" if name == "create" else "default"
        p.add_argument("--project", default="", help=f"(default: {default})")
        return p

    create = command("create", "create a long task from a request file", named=False)
    create.add_argument("--file", "-f", required=True, help="task.yaml or task.json")
    create.add_argument("--start", action="store_true", help="queue it at once (else planned)")

    listing = command("ls", "the active long tasks, then the recently finished", named=False)
    listing.add_argument("--owner", default="", help="only this owner's tasks")
    command("show", "one task: goal, state, criteria, steps, decisions, plans, attempts")
    answer = command("answer", "answer an open decision or approval, once")
    answer.add_argument("decision_id", help="the decision's id (task show lists them)")
    answer.add_argument("answer", help="one of the offered answers (a question: any text)")
    answer.add_argument("--note", default="", help="kept with the answer")
    for name, (_, _, done) in _MOVES.items():
        move = command(name, f"{name.replace('-', ' ')} a long task (sends the etag it reads)")
        move.add_argument("--note", default="", help=f"why it is {done}, kept in its log")
        if name == "clear-recovery":
            how = move.add_mutually_exclusive_group()
            how.add_argument(
                "--skip",
                dest="resolution",
                action="store_const",
                const="skip",
                help="the stopped step's work is done: skip it, on your word",
            )
            how.add_argument(
                "--retry",
                dest="resolution",
                action="store_const",
                const="retry",
                help="it is not done: the stopped step runs again",
            )
    go_on = command("continue", "go on with a finished task: a new plan version and attempt")
    go_on.add_argument("--reason", required=True, help="what the continuation is for")
    go_on.add_argument(
        "--file", "-f", default="", help="new steps/criteria (default: the unfinished steps)"
    )
    later = command("later", "schedule the next attempt: at a time, or in the next window")
    task_later.add_flags(later)
    act = command("act", "the one action contract: a task by id or handle (#3)", named=False)
    act.add_argument("task", help="a task id, or its owner's handle like #3")
    act.add_argument(
        "action",
        choices=("pause", "resume", "cancel", "continue", "answer", "approve", "deny"),
        help="what to do: pause, resume, cancel, continue, answer, approve or deny",
    )
    act.add_argument("answer", nargs="?", default="", help="answer: the answer")
    act.add_argument("--owner", default="", help="whose handle (default: the token's name)")
    act.add_argument("--etag", default="", help="the version it was chosen at (default: now)")
    act.add_argument("--decision", default="", help="the decision (default: the one open)")
    act.add_argument("--note", default="", help="kept with the change")
    act.add_argument("--action-id", default="", help="one id per action: repeat it to retry safely")
    command("events", "the task's log, oldest first")
    export = command("export", "the task as a Markdown report (never read back)")
    export.add_argument("--html", action="store_true", help="an HTML page instead (> report.html)")


def run(client: Client, args: argparse.Namespace) -> int:
    try:
        if getattr(args, "long_task_id", None):  # a handle (#3) becomes the task's id first
            args.long_task_id = task_handles.resolve(
                client.long_tasks, client.timeout, _project(args), args.owner, args.long_task_id
            )
        response, text = _COMMANDS[args.task_cmd](client.long_tasks, client, args)
    except (RequestFileError, task_handles.HandleAmbiguous) as exc:
        return say(str(exc), "INVALID_ARGUMENT")
    except task_handles.HandleUnknown as exc:
        return say(str(exc), "NOT_FOUND LONG_TASK_NOT_FOUND")
    except grpc.RpcError as error:
        return fail(error)  # refused or unreachable: one line, exit 2
    emit(args.output, response, text)
    return 0


def _project(args: argparse.Namespace) -> str:
    return str(args.project or "default")


def _read(stub: Stub, client: Client, args: argparse.Namespace) -> pb.LongTask:
    ask = pb.GetLongTaskRequest(project_id=_project(args), long_task_id=args.long_task_id)
    task: pb.LongTask = stub.GetLongTask(ask, timeout=client.timeout)
    return task


# -- the commands: each returns its response (printed by -o json) and its text --------------


def _create(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    asked = draft(load(args.file), args.project)
    request = pb.CreateLongTaskRequest(long_task=asked, start=args.start)
    task = stub.CreateLongTask(request, timeout=client.timeout)
    return task, created_text(task)


def _ls(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    project = _project(args)
    active, token = pb.ListLongTasksResponse(), ""
    while True:
        ask = pb.ListLongTasksRequest(
            project_id=project, owner_id=args.owner, active_only=True, page_token=token
        )
        page = stub.ListLongTasks(ask, timeout=client.timeout)
        active.long_tasks.extend(page.long_tasks)
        if not (token := page.next_page_token):
            break
    newest = stub.ListLongTasks(
        pb.ListLongTasksRequest(project_id=project, owner_id=args.owner, page_size=50),
        timeout=client.timeout,
    )
    recent = [t for t in newest.long_tasks if t.state in TERMINAL][:RECENT_SHOWN]
    shown = pb.ListLongTasksResponse(long_tasks=[*active.long_tasks, *recent])
    return shown, ls_text(active.long_tasks, recent)


def _show(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    task = _read(stub, client, args)
    return task, describe(task)


def _answer(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    task = _read(stub, client, args)
    ask = pb.AnswerDecisionRequest(
        project_id=task.project_id,
        long_task_id=task.long_task_id,
        decision_id=args.decision_id,
        etag=task.etag,
        answer=args.answer,
        note=args.note,
    )
    after = stub.AnswerDecision(ask, timeout=client.timeout)
    return after, moved_text(after, f"answered {args.decision_id} with {args.answer!r}")


#: Moves that carry nothing chosen from what was read: when the task's version moved between
#: this command's own read and its send (typically the scheduler starting it), they read
#: again and resend, at most this many times. A move the new state does not allow is still
#: refused by the rules; answer, continue and later never resend.
RESENT_MOVES = frozenset({"start", "pause", "resume", "cancel"})
MOVE_TRIES = 3


def _move(name: str) -> Callable[[Stub, Client, argparse.Namespace], Shown]:
    rpc, message, done = _MOVES[name]
    tries = MOVE_TRIES if name in RESENT_MOVES else 1

    def move(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
        for left in range(tries - 1, -1, -1):
            task = _read(stub, client, args)
            ask: Any = message(
                project_id=task.project_id,
                long_task_id=task.long_task_id,
                etag=task.etag,
                note=args.note,
                **({"resolution": args.resolution or ""} if name == "clear-recovery" else {}),
            )
            try:
                after: pb.LongTask = getattr(stub, rpc)(ask, timeout=client.timeout)
            except grpc.RpcError as error:
                if left and reason_of(error) == "LONG_TASK_VERSION_CONFLICT":
                    continue
                raise
            return after, moved_text(after, done)
        raise AssertionError("unreachable: the last try returns or raises")

    return move


def _continue(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    steps, criteria = plan(load(args.file)) if args.file else ([], [])
    task = _read(stub, client, args)
    ask = pb.ContinueLongTaskRequest(
        project_id=task.project_id,
        long_task_id=task.long_task_id,
        etag=task.etag,
        reason=args.reason,
        steps=steps,
        criteria=criteria,
    )
    after = stub.ContinueLongTask(ask, timeout=client.timeout)
    return after, moved_text(after, f"continued as plan v{after.plan_version}")


def _later(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    asked = task_later.spec(args, local_zone())
    task = _read(stub, client, args)
    ask = pb.ScheduleContinuationRequest(
        project_id=task.project_id, long_task_id=task.long_task_id, etag=task.etag
    )
    ask.continuation.CopyFrom(asked)
    after = stub.ScheduleContinuation(ask, timeout=client.timeout)
    return after, moved_text(after, "continuation scheduled")


def local_zone() -> str:
    """This machine's IANA zone when it can be told (TZ, /etc/localtime), else ""."""
    named = os.environ.get("TZ", "")
    if named and "/" in named:
        return named.lstrip(":")
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        return ""
    return target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else ""


def _act(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    ask = pb.ActRequest(
        project_id=_project(args),
        task=args.task,
        action=args.action,
        etag=args.etag,
        action_id=args.action_id or f"cli-{uuid.uuid4()}",
        decision_id=args.decision,
        answer=args.answer,
        note=args.note,
        owner_id=args.owner,
    )
    acted = stub.Act(ask, timeout=client.timeout)
    done = "already done" if acted.outcome == "already_done" else "done"
    return acted, moved_text(acted.long_task, f"{args.action} {done} (action {ask.action_id})")


def _events(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    found, after = pb.ListLongTaskEventsResponse(), 0
    while True:
        ask = pb.ListLongTaskEventsRequest(
            project_id=_project(args), long_task_id=args.long_task_id, after_sequence=after
        )
        page = stub.ListLongTaskEvents(ask, timeout=client.timeout)
        found.events.extend(page.events)
        if not page.events:
            break
        after = page.events[-1].sequence
    text = "\n".join(event_line(e) for e in found.events) or "no events"
    return found, text


def _export(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    ask = pb.ExportLongTaskRequest(
        project_id=_project(args),
        long_task_id=args.long_task_id,
        format=pb.EXPORT_FORMAT_HTML if args.html else pb.EXPORT_FORMAT_MARKDOWN,
    )
    report = stub.ExportLongTask(ask, timeout=client.timeout)
    return report, (report.html if args.html else report.markdown).rstrip("\n")


_COMMANDS: dict[str, Callable[[Stub, Client, argparse.Namespace], Shown]] = {
    "create": _create,
    "ls": _ls,
    "show": _show,
    "answer": _answer,
    **{name: _move(name) for name in _MOVES},
    "continue": _continue,
    "later": _later,
    "events": _events,
    "export": _export,
    "act": _act,
}
