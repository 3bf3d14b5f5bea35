"""`truerun logs RUN [-f]`: a run's output text, read from its own store (ReadRunOutput).

Output is not the event log: the text is addressed by byte offset in an attempt's stored
output, and following it is asking again from ``next_offset``. That position lives here, in
the client, so a follow survives a server restart: UNAVAILABLE is retried (with a backoff
capped at ``MAX_BACKOFF_S``) from the same offset, and nothing is printed twice.

Without ``--attempt`` the run's current attempt is read; when a retry makes a new attempt
current, the rest of the old one is read first, then the new one from its beginning, with a
``--- attempt N ---`` line on stderr between them (stdout stays the output alone).
``-o json|yaml`` prints each stored chunk as a JSON line (or a YAML document) with its
attempt, offset and kind instead of the bare text.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

import grpc
from truerun.v1 import common_pb2, run_service_pb2

from services.cli.client import Client
from services.cli.errors import say
from services.cli.output import stream_item

POLL_S = 0.5  # how often a follow asks again when nothing new came
MAX_BACKOFF_S = 2.0  # the longest wait between retries while the server is unreachable
_RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
T = TypeVar("T")
_FINISHED = {
    common_pb2.RUN_STATUS_SUCCEEDED,
    common_pb2.RUN_STATUS_FAILED,
    common_pb2.RUN_STATUS_CANCELLED,
    common_pb2.RUN_STATUS_TIMED_OUT,
}


class AttemptUnknown(Exception):
    """``--attempt N`` names no attempt of the run."""


@dataclass
class Follower:
    client: Client
    run_id: str
    follow: bool
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    sleep: Callable[[float], None] = time.sleep
    output: str = "text"  # json|yaml: each chunk as a JSON line or a YAML document
    attempt_id: str = ""  # the attempt being printed ("" before the first page)
    offset: int = 0  # where the next page starts in that attempt's stored output
    connected: bool = False  # the server answered once: a later loss is waited out

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()``; while following, a server that is away (restarting) is waited for once
        it has answered (one that never did is an error at once: a wrong or dead --server)."""
        backoff = 0.0
        while True:
            try:
                answer = fn()
                self.connected = True
                return answer
            except grpc.RpcError as error:
                code = error.code() if isinstance(error, grpc.Call) else None
                if not self.follow or code not in _RETRIED or not self.connected:
                    raise
            backoff = min(max(backoff * 2, 0.1), MAX_BACKOFF_S)
            self.sleep(backoff)

    def read(self, attempt_id: str, offset: int) -> run_service_pb2.ReadRunOutputResponse:
        request = run_service_pb2.ReadRunOutputRequest(
            run_id=self.run_id, attempt_id=attempt_id, offset=offset
        )
        return self.call(lambda: self.client.stub.ReadRunOutput(request, timeout=5.0))

    def show(self, page: run_service_pb2.ReadRunOutputResponse) -> None:
        if page.expired and page.next_offset > self.offset:
            self.note(f"--- output before byte {page.next_offset} expired ---")
        for chunk in page.chunks:
            if self.output == "text":
                self.out.write(chunk.text)
                continue
            kind = run_service_pb2.OutputChunkKind.Name(chunk.kind)
            item = {"attemptId": page.attempt_id, "attemptNo": page.attempt_no}
            item |= {"offset": chunk.offset, "kind": kind, "text": chunk.text}
            self.out.write(stream_item(item, self.output))
        self.out.flush()
        self.offset = page.next_offset

    def note(self, text: str) -> None:
        self.out.flush()  # the note goes between the output it separates
        print(text, file=self.err, flush=True)

    def enter(self, page: run_service_pb2.ReadRunOutputResponse) -> None:
        """Start printing ``page``'s attempt (its first attempt: no header)."""
        if self.attempt_id or page.attempt_no > 1:
            self.note(f"--- attempt {page.attempt_no} ---")
        self.attempt_id = page.attempt_id
        self.offset = 0

    def drain(self) -> None:
        """The rest of the attempt being printed (it ended: a later one is current)."""
        while True:
            page = self.read(self.attempt_id, self.offset)
            self.show(page)
            if page.next_offset >= page.stored_bytes:
                return

    def run(self, pinned: str) -> int:
        """Print the output (``pinned``: that attempt only; "": the current attempt, then
        each later one when following); returns the exit status."""
        while True:
            asked = self.offset
            page = self.read(pinned, asked)
            if page.attempt_id != self.attempt_id:
                if self.attempt_id:
                    self.drain()
                self.enter(page)
                if asked:
                    continue  # that page was read at the old attempt's offset
            self.show(page)
            if page.next_offset < page.stored_bytes:
                continue  # a full page: the next one at once
            if not self.follow:
                return 0
            if page.attempt_finished and (page.run_finished or pinned):
                return 0
            self.sleep(POLL_S)


def resolve_attempt(client: Client, run_id: str, given: str) -> str:
    """``--attempt``: an attempt number (1, 2, ...) or an attempt id; "" = the current one."""
    if not given or not given.isdigit():
        return given
    listing = client.stub.ListAttempts(
        run_service_pb2.ListAttemptsRequest(run_id=run_id), timeout=client.timeout
    )
    for attempt in listing.attempts:
        if attempt.attempt_no == int(given):
            return str(attempt.id)
    raise AttemptUnknown(f"run {run_id} has no attempt {given}")


def logs(client: Client, run_id: str, attempt: str, follow: bool, output: str = "text") -> int:
    """The command; Ctrl-C ends it quietly with status 130, as a shell reports SIGINT."""
    follower = Follower(client, run_id, follow, output=output)
    try:
        pinned = follower.call(lambda: resolve_attempt(client, run_id, attempt))
        while True:
            try:
                return follower.run(pinned)
            except grpc.RpcError as error:
                if pinned or not isinstance(error, grpc.Call):
                    raise
                if error.code() != grpc.StatusCode.NOT_FOUND:
                    raise
                # Not found: the run (GetRun says so, as an error), or its first attempt.
                run = follower.call(
                    lambda: client.stub.GetRun(
                        run_service_pb2.GetRunRequest(id=run_id), timeout=client.timeout
                    )
                )
                if run.current_attempt_id:
                    raise
                if not follow or run.status in _FINISHED:
                    follower.note(f"--- run {run_id} has no attempt ---")
                    return 0
                follower.sleep(POLL_S)  # queued or waiting for approval: wait for it
    except AttemptUnknown as unknown:
        return say(str(unknown), "NOT_FOUND")  # exit 2, as every refusal
    except KeyboardInterrupt:
        return 130
