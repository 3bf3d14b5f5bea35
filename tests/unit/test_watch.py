"""`truerun watch`'s loop over a scripted stub: the exit status per ending, the resume after a
broken stream from the last sequence printed (nothing twice), and when it gives up."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any, cast

import grpc
import pytest
from truerun.v1 import common_pb2, run_service_pb2

from services.cli.client import Client
from services.cli.watch import RECONNECT_FOR_S, Watcher, exit_status


class Unavailable(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection refused"


class Call:
    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[common_pb2.RunEvent]:
        for item in self.items:
            if isinstance(item, Exception):
                raise item
            yield item

    def cancel(self) -> None:
        pass


class Stub:
    """Answers each WatchRunEvents with the next scripted stream, remembering the requests."""

    def __init__(self, *streams: list[Any]) -> None:
        self.streams = list(streams)
        self.asked: list[int] = []

    def WatchRunEvents(self, request: run_service_pb2.WatchRunEventsRequest) -> Call:
        self.asked.append(request.after_sequence)
        return Call(self.streams.pop(0) if self.streams else [Unavailable()])


def _event(sequence: int, kind: str) -> common_pb2.RunEvent:
    return common_pb2.RunEvent(sequence=sequence, type=kind)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _watcher(stub: Stub) -> tuple[Watcher, io.StringIO, io.StringIO]:
    client = cast(Client, type("FakeClient", (), {"stub": stub})())
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    return Watcher(client, "r1", out, err, clock.sleep, clock), out, err


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("run.succeeded", 0),
        ("run.failed", 1),
        ("run.timed_out", 1),
        ("run.cancelled", 1),
        ("run.lost", None),
        ("attempt.failed", None),
        ("run.created", None),
    ],
)
def test_exit_status_says_how_the_run_ended(kind: str, status: int | None) -> None:
    assert exit_status(kind) == status


def test_a_broken_stream_resumes_after_the_last_event_printed() -> None:
    stub = Stub(
        [_event(1, "run.created"), _event(2, "attempt.running"), Unavailable()],
        [Unavailable()],  # still restarting
        [],  # a stream that ends without the run ending (a server shutting down)
        [_event(2, "attempt.running"), _event(3, "run.failed")],  # an overlapping replay
    )
    watcher, out, err = _watcher(stub)
    assert watcher.follow() == 1
    assert stub.asked == [0, 2, 2, 2]
    assert [line.split()[0] for line in out.getvalue().splitlines()] == ["1", "2", "3"]
    assert err.getvalue() == ""


def test_a_server_never_reached_is_an_error_and_one_lost_for_good_ends_with_2() -> None:
    watcher, out, _ = _watcher(Stub([Unavailable()]))
    with pytest.raises(grpc.RpcError):
        watcher.follow()  # never connected: the command reports it (exit 2) at once
    watcher, out, err = _watcher(Stub([_event(1, "run.created"), Unavailable()]))
    assert watcher.follow() == 2
    assert out.getvalue().count("\n") == 1
    assert f"did not come back within {RECONNECT_FOR_S:.0f} s" in err.getvalue()
