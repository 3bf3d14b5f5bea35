"""`truerun task pause|start|resume|cancel` read the task and send its etag; when only the
version moved between that read and the send (the scheduler started the task), they read
again and resend, a bounded number of times. Moves whose meaning depends on what was read
(clear-recovery) never resend."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from truerun.v1 import long_task_service_pb2 as pb

from services.cli import main, task


class Conflict(grpc.RpcError):
    """What the server answers for a stale etag: ABORTED with its ErrorInfo reason."""

    def __init__(self, reason: str) -> None:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="truerun.dev"))
        status = status_pb2.Status(code=grpc.StatusCode.ABORTED.value[0], details=[detail])
        self._metadata = (("grpc-status-details-bin", status.SerializeToString()),)

    def trailing_metadata(self) -> Any:
        return self._metadata


class Server:
    """A task whose version moves ``moves`` times between a read and the send that follows."""

    def __init__(self, moves: int, reason: str = "LONG_TASK_VERSION_CONFLICT") -> None:
        self.version, self.moves, self.reason = 1, moves, reason
        self.sent: list[str] = []
        self.resolutions: list[str] = []

    def GetLongTask(self, ask: pb.GetLongTaskRequest, timeout: float) -> pb.LongTask:
        return pb.LongTask(long_task_id=ask.long_task_id, project_id="p", etag=str(self.version))

    def _move(self, ask: Any, state: pb.LongTaskState.ValueType) -> pb.LongTask:
        self.sent.append(ask.etag)
        if self.moves:
            self.moves -= 1
            self.version += 1  # the scheduler acted between the read and this send
            raise Conflict(self.reason)
        self.version += 1
        return pb.LongTask(long_task_id=ask.long_task_id, etag=str(self.version), state=state)

    def PauseLongTask(self, ask: pb.PauseLongTaskRequest, timeout: float) -> pb.LongTask:
        return self._move(ask, pb.LONG_TASK_STATE_PAUSED)

    def ClearRecovery(self, ask: pb.ClearRecoveryRequest, timeout: float) -> pb.LongTask:
        self.resolutions.append(ask.resolution)
        return self._move(ask, pb.LONG_TASK_STATE_QUEUED)


ARGS = argparse.Namespace(long_task_id="lt-1", project="p", note="", resolution=None)
CLIENT: Any = SimpleNamespace(timeout=5.0)  # all a command reads of its client


def test_pause_reads_again_and_resends_when_only_the_version_moved() -> None:
    server = Server(moves=2)
    after, text = task._move("pause")(server, CLIENT, ARGS)  # type: ignore[arg-type]
    assert isinstance(after, pb.LongTask) and after.state == pb.LONG_TASK_STATE_PAUSED
    assert server.sent == ["1", "2", "3"] and "paused" in text


def test_pause_gives_up_after_its_tries_with_the_servers_refusal() -> None:
    server = Server(moves=task.MOVE_TRIES)
    with pytest.raises(Conflict):
        task._move("pause")(server, CLIENT, ARGS)  # type: ignore[arg-type]
    assert len(server.sent) == task.MOVE_TRIES


def test_another_refusal_is_never_resent() -> None:
    server = Server(moves=1, reason="INVALID_LONG_TASK_TRANSITION")
    with pytest.raises(Conflict):
        task._move("pause")(server, CLIENT, ARGS)  # type: ignore[arg-type]
    assert server.sent == ["1"]


def test_clear_recovery_never_resends() -> None:
    server = Server(moves=1)
    with pytest.raises(Conflict):
        task._move("clear-recovery")(server, CLIENT, ARGS)  # type: ignore[arg-type]
    assert server.sent == ["1"]


@pytest.mark.parametrize(
    ("flags", "sent"), [([], ""), (["--skip"], "skip"), (["--retry"], "retry")]
)
def test_clear_recovery_sends_the_persons_resolution(flags: list[str], sent: str) -> None:
    args = main._parser().parse_args(["task", "clear-recovery", "lt-1", *flags])
    server = Server(moves=0)
    _, text = task._move("clear-recovery")(server, CLIENT, args)  # type: ignore[arg-type]
    assert server.resolutions == [sent] and "recovery cleared" in text


def test_skip_and_retry_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main._parser().parse_args(["task", "clear-recovery", "lt-1", "--skip", "--retry"])
    assert "not allowed with argument" in capsys.readouterr().err
