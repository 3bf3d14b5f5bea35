"""`truerun watch RUN`: a run's committed events as they happen, until it ends.

The exit status says how the run ended, so a script can wait on a run:

    0  the run succeeded
    1  the run ended and did not succeed (failed, timed out, cancelled)
    2  truerun could not tell: a usage error, an unknown run, a refused token, or a server
       that could not be reached (at the start, or for ``RECONNECT_FOR_S`` after losing it)
  130  Ctrl-C (the run goes on; one line on stderr says so)

``-o json|yaml`` prints each event as a JSON line (or a YAML document) instead.

The position is the last event sequence printed, kept here in the client: when the stream
breaks (the server restarts, a proxy drops it) the watch asks again with ``after_sequence``
after a backoff capped at ``MAX_BACKOFF_S``, so nothing is printed twice and nothing is missed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import grpc
from truerun.v1 import common_pb2, run_service_pb2

from services.cli.client import Client, event_line, fail
from services.cli.output import stream_item

MAX_BACKOFF_S = 2.0  # the longest wait between reconnects
RECONNECT_FOR_S = 120.0  # how long a lost server is waited for before giving up (exit 2)
STREAM_HELD_S = 5.0  # a stream that lasted this long was connected, events or not
EXIT_SUCCEEDED, EXIT_NOT_SUCCEEDED, EXIT_UNKNOWN, EXIT_INTERRUPTED = 0, 1, 2, 130
_ENDED = {"run.succeeded", "run.failed", "run.cancelled", "run.timed_out"}
_RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def exit_status(event_type: str) -> int | None:
    """The exit status a run's event ends the watch with; None: the run goes on."""
    if event_type not in _ENDED:
        return None
    return EXIT_SUCCEEDED if event_type == "run.succeeded" else EXIT_NOT_SUCCEEDED


@dataclass
class Watcher:
    client: Client
    run_id: str
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    output: str = "text"  # json|yaml: each event as a JSON line or a YAML document
    last_sequence: int = 0  # the last event printed; a reconnect asks for the ones after it
    connected: bool = False  # the server answered once: a later loss is waited out

    def stream(self) -> Iterator[common_pb2.RunEvent]:
        call: Any = self.client.stub.WatchRunEvents(
            run_service_pb2.WatchRunEventsRequest(
                run_id=self.run_id, after_sequence=self.last_sequence
            )
        )
        try:
            for event in call:
                self.connected = True
                yield event
        finally:
            call.cancel()

    def follow(self) -> int:
        """Print events until the run ends; the exit status (RpcErrors it cannot wait out
        are raised)."""
        backoff, lost_at = 0.0, None
        while True:
            started = self.clock()
            try:
                for event in self.stream():
                    backoff, lost_at = 0.0, None
                    if event.sequence <= self.last_sequence:
                        continue  # already printed (a replay that overlaps)
                    if self.output == "text":
                        print(event_line(event), file=self.out, flush=True)
                    else:
                        self.out.write(stream_item(event, self.output))
                        self.out.flush()
                    self.last_sequence = event.sequence
                    status = exit_status(event.type)
                    if status is not None:
                        return status
                # The stream ended without the run ending (a server shutting down): ask again.
            except grpc.RpcError as error:
                code = error.code() if isinstance(error, grpc.Call) else None
                if code not in _RETRIED or not self.connected:
                    raise
            now = self.clock()
            if now - started > STREAM_HELD_S:
                lost_at = None  # that stream was up (a quiet run): a new loss starts now
            lost_at = now if lost_at is None else lost_at
            if now - lost_at > RECONNECT_FOR_S:
                print(
                    f"error: the server did not come back within {RECONNECT_FOR_S:.0f} s "
                    f"[UNAVAILABLE]",
                    file=self.err,
                    flush=True,
                )
                return EXIT_UNKNOWN
            backoff = min(max(backoff * 2, 0.1), MAX_BACKOFF_S)
            self.sleep(backoff)


def watch(client: Client, run_id: str, output: str = "text") -> int:
    """The command; Ctrl-C ends it with status 130 and one line, no traceback."""
    try:
        return Watcher(client, run_id, output=output).follow()
    except grpc.RpcError as error:
        fail(error)  # one line: what the server said (or that there was none)
        return EXIT_UNKNOWN
    except KeyboardInterrupt:
        print(
            f"interrupted; run {run_id} goes on (truerun watch {run_id} to follow it again)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED
