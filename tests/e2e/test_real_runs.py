"""Real runs end to end: ``truerun dev`` (SQLite and PostgreSQL) and the reference
``truerun agent`` as real processes, real commands, real gRPC on loopback.

Every wait is a bounded poll of the API (GetRun every ~50 ms) or of a file; nothing waits a
fixed time to synchronise. Commands that must run "for a while" are gated on files the test
creates, so the test decides when they end.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from truerun.v1 import capacity_service_pb2, common_pb2
from truerun.v1 import run_service_pb2 as rs

from tests.e2e.conftest import OWNER, Live, display, eventually, payload
from tests.support.output import read_output
from tests.support.processes import TRUERUN, pids_with_arg
from truerun_runtime.agent.procfs import read_json

pytestmark = pytest.mark.e2e

TERMINAL = ("succeeded", "failed", "cancelled", "timed_out", "lost")
# The order in which a healthy run may be displayed; a poll can skip states, never go back.
FORWARD = ["queued", "starting", "waiting_runtime", "running"]


def _types(events: list[common_pb2.RunEvent]) -> list[str]:
    return [e.type for e in events]


def _first(events: list[common_pb2.RunEvent], kind: str) -> common_pb2.RunEvent:
    return next(e for e in events if e.type == kind)


def _assert_forward(seen: list[str], final: str) -> None:
    """Display states only ever move forward along FORWARD, then to ``final``."""
    assert seen[-1] == final, seen
    ranks = [FORWARD.index(s) for s in seen[:-1]]
    assert ranks == sorted(ranks), f"display went backwards: {seen}"


def _gate(tmp_path: Path, name: str) -> Path:
    return tmp_path / f"gate-{name}"


def _wait_gate(gate: Path) -> str:
    """Shell that blocks until ``gate`` exists."""
    return f"while [ ! -e '{gate}' ]; do sleep 0.05; done"


def _intervals(path: Path) -> dict[str, tuple[float, float]]:
    """``start <t> <name>`` / ``end <t> <name>`` lines -> name: (start, end)."""
    starts: dict[str, float] = {}
    spans: dict[str, tuple[float, float]] = {}
    for line in path.read_text().splitlines():
        kind, stamp, name = line.split()
        if kind == "start":
            assert name not in starts, f"{name} started twice"
            starts[name] = float(stamp)
        else:
            spans[name] = (starts[name], float(stamp))
    return spans


def _assert_no_overlap(spans: dict[str, tuple[float, float]]) -> list[str]:
    """No two commands ran at the same time; returns the names in start order."""
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    for (a, (_, a_end)), (b, (b_start, _)) in itertools.pairwise(ordered):
        assert a_end <= b_start, f"{a} and {b} overlapped: {spans}"
    return [name for name, _ in ordered]


def _logged(log: Path, name: str, body: str) -> str:
    """A command that logs its start and end (wall time) to ``log`` around ``body``."""
    return (
        f"echo start $(date +%s.%N) {name} >> '{log}'; {body}; "
        f"echo end $(date +%s.%N) {name} >> '{log}'"
    )


# -- 1. a command runs -------------------------------------------------------------------------


def test_command_runs_to_succeeded_with_output(live: Live, tmp_path: Path) -> None:
    gate = _gate(tmp_path, "finish")
    run_id = live.submit(f"echo hello from e2e; {_wait_gate(gate)}; echo bye")
    assert display(live.get(run_id)) == "queued"  # no runtime connected: nothing pretends
    live.start_agent(limit=1)
    live.wait_for(
        run_id,
        lambda r: display(r) == "running" and "hello from e2e" in live.output(run_id),
        what="running with its first output",
    )
    gate.touch()
    run = live.wait_display(run_id, *TERMINAL)
    assert display(run) == "succeeded"
    assert run.current_attempt.exit_code == 0
    assert run.current_attempt.status == common_pb2.ATTEMPT_STATUS_SUCCEEDED

    events = live.events(run_id)
    types = _types(events)
    order = [
        "run.created",
        "run.queued",
        "attempt.claimed",
        "run.dispatching",
        "attempt.start_requested",
        "attempt.accepted",
        "attempt.running",
        "run.running",
        "attempt.succeeded",
        "run.succeeded",
    ]
    positions = [types.index(t) for t in order]
    assert positions == sorted(positions), types
    assert types[-1] == "run.succeeded"
    assert live.output(run_id) == "hello from e2e\nbye\n"
    running = _first(events, "attempt.running").sequence
    assert all(e.sequence > running for e in events if e.type == "attempt.output_progressed")
    assert payload(_first(events, "attempt.succeeded"))["exit_code"] == 0

    # Never displayed running before the attempt.running event was committed.
    for sample in live.history[run_id]:
        if sample.display == "running":
            assert sample.event_sequence >= running, (sample, types)
    _assert_forward(live.displayed(run_id), "succeeded")


# -- 2. failures -------------------------------------------------------------------------------


def test_failing_command_is_failed_with_its_exit_code(live: Live) -> None:
    live.start_agent(limit=1)
    run_id = live.submit("echo about to fail; exit 3")
    run = live.wait_display(run_id, *TERMINAL, "retry_wait")
    assert display(run) == "failed"
    attempt = run.current_attempt
    assert attempt.status == common_pb2.ATTEMPT_STATUS_FAILED
    assert attempt.HasField("exit_code") and attempt.exit_code == 3
    assert run.error_code == "EXIT_NONZERO"
    events = live.events(run_id)
    assert "about to fail" in live.output(run_id)
    failed = _first(events, "attempt.failed")
    assert payload(failed)["exit_code"] == 3
    assert _types(events)[-1] == "run.failed"


def test_failing_command_with_attempts_left_is_retried_as_a_new_attempt(live: Live) -> None:
    live.start_agent(limit=1)
    env = {**os.environ, "TRUERUN_SERVER": live.address, "TRUERUN_API_TOKEN": live.api_token}
    submitted = subprocess.run(
        [
            *(TRUERUN, "submit", "flaky", "--project", "e2e", "--owner", OWNER),
            *("--command", "echo attempt $TRUERUN_ATTEMPT_ID; exit 4", "--max-attempts", "2"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    run_id = submitted.stdout.split()[0]
    run = live.wait_display(run_id, *TERMINAL, timeout=60)
    assert display(run) == "failed", run.display_reason
    assert run.max_attempts == 2 and run.attempt_count == 2
    events = live.events(run_id)
    types = _types(events)
    # attempt 1 failed -> retry_wait -> (backoff) a new attempt queued -> it failed too
    assert types.index("run.retry_wait") < types.index("run.retrying") < types.index("run.failed")
    failed = [e for e in events if e.type == "attempt.failed"]
    assert [payload(e)["exit_code"] for e in failed] == [4, 4]
    first, second = (e.attempt_id for e in failed)
    assert first != second
    output = read_output(live.runs, run_id, first) + read_output(live.runs, run_id, second)
    assert f"attempt {first}" in output and f"attempt {second}" in output
    shown = subprocess.run(
        [TRUERUN, "show", run_id], env=env, capture_output=True, text=True, timeout=30, check=True
    )
    assert "attempts 2" in shown.stdout


# -- 3. cancel ---------------------------------------------------------------------------------


def test_cancel_while_running_stops_the_process(live: Live) -> None:
    marker = f"e2e-cancel-{uuid.uuid4().hex}"
    # sh ignores TERM (and so do its children): only the SIGKILL after the grace stops it.
    command = f"trap '' TERM; echo ready; while :; do sleep 0.05; done; : {marker}"
    live.start_agent(limit=1)
    run_id = live.submit(command)
    live.wait_for(
        run_id,
        lambda r: display(r) == "running" and "ready" in live.output(run_id),
        what="running with the TERM trap set",
    )
    assert pids_with_arg(marker), "the command should be running"
    response = live.runs.CancelRun(rs.CancelRunRequest(id=run_id, reason="e2e"), timeout=10)
    assert response.outcome == rs.CANCEL_OUTCOME_REQUESTED
    assert display(response.run) == "cancelling"

    # While the runtime has not confirmed, the run is cancelling, and the process really runs.
    live.wait_for(
        run_id,
        lambda r: "attempt.signalled" in _types(live.events(run_id)),
        what="the SIGTERM",
    )
    run = live.get(run_id)
    assert display(run) == "cancelling"
    assert pids_with_arg(marker), "TERM is trapped: the command must survive it"

    run = live.wait_display(run_id, *TERMINAL, timeout=20)
    assert display(run) == "cancelled"
    seen = live.displayed(run_id)
    assert seen[seen.index("cancelling") :] == ["cancelling", "cancelled"], seen
    events = live.events(run_id)
    signalled = [payload(e)["signal"] for e in events if e.type == "attempt.signalled"]
    assert signalled == ["SIGTERM", "SIGKILL"]
    cancelled = _first(events, "attempt.cancelled")
    assert payload(cancelled)["exit_code"] == 137
    assert run.current_attempt.exit_code == 137
    assert _types(events)[-1] == "run.cancelled"
    assert not pids_with_arg(marker), "the cancelled command still runs"


# -- 4. the local limit D ----------------------------------------------------------------------


def test_limit_D_is_never_exceeded(live: Live, tmp_path: Path) -> None:
    log = tmp_path / "spans.log"
    live.start_agent(limit=1)
    ids = [live.submit(_logged(log, f"r{i}", "sleep 0.3"), f"limited-{i}") for i in range(3)]
    while True:
        runs = [live.get(run_id) for run_id in ids]
        states = [display(r) for r in runs]
        running = [s for s in states if s == "running"]
        assert len(running) <= 1, states
        if running:
            waiting = [s for s in states if s not in ("running", *TERMINAL)]
            assert set(waiting) <= {"queued", "waiting_runtime", "starting"}, states
        if all(s in TERMINAL for s in states):
            break
        assert time.monotonic() - live.history[ids[0]][0].at < 30, states
        time.sleep(0.05)
    assert states == ["succeeded"] * 3
    spans = _intervals(log)
    assert sorted(spans) == ["r0", "r1", "r2"]
    _assert_no_overlap(spans)
    occupancy = live.occupancy()
    assert occupancy.limit == 1 and occupancy.durable_rows == 0


# -- 5. the agent dies, the commands do not ----------------------------------------------------


def test_agent_sigkill_mid_run_reattaches(live: Live, tmp_path: Path) -> None:
    marker = tmp_path / "started.txt"
    gate = _gate(tmp_path, "early")
    agent = live.start_agent(limit=2)
    long_id = live.submit(f"echo started >> '{marker}'; sleep 3; echo done; exit 7", "long")
    early_id = live.submit(f"echo early; {_wait_gate(gate)}; echo finished-while-down; exit 5")
    for run_id in (long_id, early_id):
        live.wait_display(run_id, "running")
    eventually(lambda: marker.exists() and marker.read_text(), 10, "the marker line")

    agent.kill()  # SIGKILL: no chance to clean up; the supervisors live on
    early = live.get(early_id).current_attempt
    gate.touch()
    status = live.state_dir / "tasks" / early.id / "status.json"
    eventually(lambda: read_json(status), 10, "the early command's exit status on disk")
    # The agent is down: no evidence, no change. Neither run pretends to have ended.
    assert display(live.get(long_id)) == "running"
    assert display(live.get(early_id)) == "running"

    long_attempt = live.get(long_id).current_attempt.id
    assert not (live.state_dir / "tasks" / long_attempt / "status.json").exists(), (
        "the long command must still run when the agent comes back (re-attach, not recovery)"
    )
    live.start_agent(limit=2)
    early_run = live.wait_display(early_id, *TERMINAL)
    assert display(early_run) == "failed"
    assert early_run.current_attempt.exit_code == 5
    assert "finished-while-down" in live.output(early_id)

    run = live.wait_display(long_id, *TERMINAL, timeout=15)
    assert display(run) == "failed"
    assert run.current_attempt.exit_code == 7
    events = live.events(long_id)
    assert live.output(long_id).endswith("done\n")
    assert _types(events).count("attempt.running") == 1
    assert _types(events).count("attempt.failed") == 1
    assert marker.read_text() == "started\n", "the command must have started exactly once"
    seqs = [int(payload(e)["seq"]) for e in events if "seq" in payload(e)]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs)), seqs


# -- 6. run now --------------------------------------------------------------------------------


def test_run_now_on_a_full_runtime_waits(live: Live, tmp_path: Path) -> None:
    log = tmp_path / "spans.log"
    gate = _gate(tmp_path, "long")
    live.start_agent(limit=1)
    long_id = live.submit(_logged(log, "long", _wait_gate(gate)), "long")
    live.wait_display(long_id, "running")
    older = [live.submit(_logged(log, f"older{i}", "true"), f"older-{i}") for i in range(2)]
    now_id = live.submit(_logged(log, "now", "true"), "urgent", run_now=True)

    # The slot is taken: the run-now run waits (queued, or accepted by the runtime and
    # waiting for its slot), however often we look. Bounded observation, not a sleep.
    for _ in range(20):
        for run_id in (now_id, *older):
            assert display(live.get(run_id)) in ("queued", "starting", "waiting_runtime")
        time.sleep(0.05)
    assert "now" not in _intervals(log)

    gate.touch()
    for run_id in (long_id, now_id, *older):
        assert display(live.wait_display(run_id, *TERMINAL)) == "succeeded"
    order = _assert_no_overlap(_intervals(log))
    assert order == ["long", "now", "older0", "older1"], order


# -- 7. nobody to confirm: a cancel waits for the runtime; a server crash loses nothing ---------


def test_cancel_while_the_agent_is_down_waits_for_it(live: Live) -> None:
    marker = f"e2e-down-{uuid.uuid4().hex}"
    agent = live.start_agent(limit=1)
    run_id = live.submit(f"echo ready; while :; do sleep 0.05; done; : {marker}")
    live.wait_for(run_id, lambda r: "ready" in live.output(run_id), what="ready")
    agent.kill()
    response = live.runs.CancelRun(rs.CancelRunRequest(id=run_id), timeout=10)
    assert response.outcome == rs.CANCEL_OUTCOME_REQUESTED
    # Nobody can confirm the stop: the run is cancelling, and the command really still runs.
    assert display(live.get(run_id)) == "cancelling"
    assert pids_with_arg(marker)
    live.start_agent(limit=1)  # the cancel is sent again when the runtime reconnects
    run = live.wait_display(run_id, *TERMINAL, timeout=20)
    assert display(run) == "cancelled"
    assert run.current_attempt.exit_code == 143  # sh ends on the SIGTERM
    assert not pids_with_arg(marker)
    signalled = [payload(e)["signal"] for e in live.events(run_id) if e.type == "attempt.signalled"]
    assert signalled == ["SIGTERM"]


def test_server_sigkill_mid_run_loses_no_events(live: Live, tmp_path: Path) -> None:
    gate = _gate(tmp_path, "server-down")
    live.start_agent(limit=1)
    run_id = live.submit(f"echo before; {_wait_gate(gate)}; echo after; exit 0")
    live.wait_for(run_id, lambda r: "before" in live.output(run_id), what="output")
    live.server.kill()
    gate.touch()  # the command ends while truerun is down; the agent keeps the evidence
    attempt = live.state_dir / "tasks"
    eventually(lambda: list(attempt.glob("*/status.json")), 10, "the exit status on disk")
    live.restart_server()
    run = live.wait_display(run_id, *TERMINAL, timeout=20)
    assert display(run) == "succeeded"
    events = live.events(run_id)
    assert live.output(run_id) == "before\nafter\n"
    types = _types(events)
    for once in ("attempt.accepted", "attempt.running", "attempt.succeeded", "run.succeeded"):
        assert types.count(once) == 1, types
    # output is in the output store: applied seqs rise to the terminal one's; an event whose
    # ack the kill cut off is re-sent and recorded as a duplicate (late_callback_ignored)
    late = "attempt.late_callback_ignored"
    applied = [int(payload(e)["seq"]) for e in events if "seq" in payload(e) and e.type != late]
    assert applied == sorted(set(applied)) and applied[0] == 1, applied
    assert run.current_attempt.last_event_seq == applied[-1], applied
    for note in (payload(e) for e in events if e.type == late):
        assert note["ignored_because"] == "duplicate_or_out_of_order" and note["seq"] in applied


def test_agent_killed_and_never_restarted_is_unknown_and_holds_capacity(
    live_short_lease: Live,
) -> None:
    """Seed A §10: a silent runtime's started attempt becomes unknown and keeps its slot;
    nothing declares it failed or runs it again."""
    live = live_short_lease
    agent = live.start_agent(limit=1)
    run_id = live.submit("sleep 600", "long")
    live.wait_display(run_id, "running", timeout=30)
    agent.kill()
    run = live.wait_display(run_id, "unknown", timeout=30)
    assert run.current_attempt.status == common_pb2.ATTEMPT_STATUS_RUNNING
    occupancy = live.capacity.GetOccupancy(
        capacity_service_pb2.GetOccupancyRequest(
            owner_id=OWNER, runtime_instance_id=live.instance_id
        )
    )
    assert occupancy.durable_rows == 1 and occupancy.free_slots == 0
    second = live.submit("true", "waits")
    assert display(live.runs.GetRun(rs.GetRunRequest(id=second))) == "queued"
    assert "run.failed" not in _types(live.events(run_id))
