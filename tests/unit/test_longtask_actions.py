"""The step driver's reading of a step's declared action and probe, of a command's receipt
(its last stdout line), and of a failed call's ErrorInfo; and the agent's reading of a
long task's Start."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from truerun.v1 import long_task_service_pb2 as lpb

from truerun_runtime import TlsFiles
from truerun_runtime.agent.config import AgentConfig
from truerun_runtime.agent.tasks import SpecError, parse_spec
from truerun_runtime.longtask import AttemptConfigError, LongTaskAttempt
from truerun_runtime.longtask.actions import (
    ActionError,
    ReceiptError,
    parse_action,
    parse_probe,
    parse_receipt,
)
from truerun_runtime.longtask.errors import (
    LeaseNotHeld,
    LongTaskError,
    TransitionRefused,
    VersionConflict,
    from_rpc,
)


def test_a_receipt_is_the_last_stdout_line() -> None:
    last = '{"external_id": "m-7", "target": "t", "summary": "sent", "at_ms": 1700000000000}'
    out = f'posting...\n{{"ignored": 1}}\n{last}\n\n'
    receipt = parse_receipt(out)
    assert (receipt.external_id, receipt.target, receipt.summary, receipt.at_ms) == (
        "m-7",
        "t",
        "sent",
        1700000000000,
    )
    defaulted = parse_receipt(
        '{"summary": "ok", "at_ms": 5, "external_id": 9, "detail": {"a": 1}}', default_target="x"
    )
    assert defaulted.target == "x" and defaulted.external_id == "9" and defaulted.detail == {"a": 1}


@pytest.mark.parametrize(
    "out",
    [
        "",
        "\n  \n",
        "done",
        '{"target": "t", "summary": "s", "at_ms": 1}\nnot json',
        "[1, 2]",
        '{"target": "t", "at_ms": 1}',
        '{"target": "t", "summary": " ", "at_ms": 1}',
        '{"target": "t", "summary": "s"}',
        '{"target": "t", "summary": "s", "at_ms": true}',
        '{"target": "t", "summary": "s", "at_ms": -1}',
        '{"target": "t", "summary": "s", "at_ms": 1, "detail": [1]}',
        '{"summary": "s", "at_ms": 1}',
    ],
)
def test_no_receipt_is_a_receipt_error(out: str) -> None:
    with pytest.raises(ReceiptError):
        parse_receipt(out)


def test_actions() -> None:
    action = parse_action(
        {"run": "make", "receipt": "json", "writes": "out.txt", "approval": "deploy"}
    )
    assert (action.run, action.receipt, action.writes, action.approval) == (
        "make",
        "json",
        "out.txt",
        "deploy",
    )
    assert parse_action({"run": "true"}).receipt == "none"
    assert parse_action({"run": "post", "prepare": "render > msg"}).prepare == "render > msg"
    question = parse_action({"ask": "which colour?", "options": ["red", "blue"]})
    assert question.is_question and question.options == ("red", "blue")
    assert parse_probe({}) == "" and parse_probe({"run": "test -f x"}) == "test -f x"


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"run": ""},
        {"run": 3},
        {"run": "x", "receipt": "xml"},
        {"run": "x", "writes": 1},
        {"run": "x", "prepare": ["render"]},
        {"ask": ""},
        {"ask": "q", "options": "a,b"},
        {"ask": "q", "run": "x"},
    ],
)
def test_bad_actions(spec: dict[str, object]) -> None:
    with pytest.raises(ActionError):
        parse_action(spec)


def test_bad_probe() -> None:
    with pytest.raises(ActionError):
        parse_probe({"cmd": "x"})


def _rpc_error(code: grpc.StatusCode, reason: str, refusal: str = "") -> grpc.aio.AioRpcError:
    info = error_details_pb2.ErrorInfo(
        reason=reason, domain="truerun", metadata={"refusal": refusal} if refusal else {}
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message="m", details=[detail])
    trailing = grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, "the details", "")


def test_errors_carry_the_reason_and_the_refusal() -> None:
    conflict = from_rpc(_rpc_error(grpc.StatusCode.ABORTED, "LONG_TASK_VERSION_CONFLICT"))
    assert isinstance(conflict, VersionConflict) and conflict.reason == "LONG_TASK_VERSION_CONFLICT"
    lease = from_rpc(_rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "LONG_TASK_LEASE_NOT_HELD"))
    assert isinstance(lease, LeaseNotHeld)
    refused = from_rpc(
        _rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "INVALID_STEP_TRANSITION", "OPEN_INTENT")
    )
    assert isinstance(refused, TransitionRefused) and refused.refusal == "OPEN_INTENT"
    assert "OPEN_INTENT" in str(refused) and "the details" in str(refused)
    bare = from_rpc(
        grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "down", ""
        )
    )
    assert type(bare) is LongTaskError and bare.reason == "" and bare.retryable


def test_a_long_task_start_runs_the_step_driver() -> None:
    spec = parse_spec({"long_task": {"id": "lt-1", "attempt_id": "a1"}})
    assert spec.long_task and spec.argv == [sys.executable, "-m", "truerun_runtime.longtask"]
    plain = parse_spec({"long_task": {"id": "lt-1"}, "command": "echo hi"})
    assert not plain.long_task and plain.argv == ["/bin/sh", "-c", "echo hi"]
    with pytest.raises(SpecError):
        parse_spec({"long_task": "lt-1"})


def test_the_step_driver_dials_truerun_as_the_agent_does(tmp_path: Path) -> None:
    """A long task's child gets TRUERUN_SERVER and the agent's TLS files (absolute), never
    the runtime token; https:// without files stays https:// (the system's trust store)."""
    plain = AgentConfig(server="127.0.0.1:7000", token="secret", owner_id="o", state_dir=tmp_path)
    assert plain.server_env() == {"TRUERUN_SERVER": "127.0.0.1:7000"}
    system = replace(plain, credentials=grpc.ssl_channel_credentials())
    assert system.server_env() == {"TRUERUN_SERVER": "https://127.0.0.1:7000"}
    files = replace(system, tls_files=TlsFiles(ca_file="ca.pem"))
    env = files.server_env()
    assert env["TRUERUN_SERVER"] == "127.0.0.1:7000"
    assert env["TRUERUN_TLS_CA_FILE"] == str(Path("ca.pem").resolve())
    assert "secret" not in repr(env) and "TRUERUN_TLS_CLIENT_CERT_FILE" not in env


def test_the_lease_is_renewed_at_a_third_of_what_it_has_left() -> None:
    """From the expiry truerun last told (a briefing, then each renewal's answer), bounded
    to 1..60 s; 10 s before truerun told any."""
    attempt = LongTaskAttempt("127.0.0.1:1", "run", "attempt", "token")
    assert attempt._renew_interval() == 10.0
    briefing = lpb.Briefing()
    briefing.lease_expire_time.FromMilliseconds(int((time.time() + 30) * 1000))
    attempt._lease_told(briefing)
    assert 9.0 <= attempt._renew_interval() <= 10.0
    renewed = lpb.TaskAck()
    renewed.lease_expire_time.FromMilliseconds(int((time.time() + 600) * 1000))
    attempt._lease_told(renewed)
    assert attempt._renew_interval() == 60.0
    attempt._lease_told(lpb.TaskAck())  # no lease told: the last one stands
    assert attempt._renew_interval() == 60.0


def test_an_attempt_needs_its_whole_credential() -> None:
    with pytest.raises(AttemptConfigError, match="TRUERUN_CALLBACK_TOKEN"):
        LongTaskAttempt.from_env(
            {"TRUERUN_SERVER": "h:1", "TRUERUN_RUN_ID": "r", "TRUERUN_ATTEMPT_ID": "a"}
        )
    made = LongTaskAttempt.from_env(
        {
            "TRUERUN_SERVER": "https://h:1",
            "TRUERUN_RUN_ID": "r",
            "TRUERUN_ATTEMPT_ID": "a",
            "TRUERUN_CALLBACK_TOKEN": "t",
        }
    )
    assert made.address == "h:1" and made.credential.callback_token == "t"
