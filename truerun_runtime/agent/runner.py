"""One task's life in the agent: accept, launch under a supervisor, follow, stop, report.

Everything a runner knows comes from files a restarted agent can read again: the task dir
(task.json, the supervisor's handle and status, stop.json, output.log) and the outbox journal
(which events were written, how far the log was streamed). A runner never trusts a PID: it
re-reads the durable handle and proves it before every signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from truerun.v1 import runtime_service_pb2 as pb

from truerun_runtime import TERMINAL_TYPES, make_event

from .launches import MAX_LAUNCHES, Launches
from .output import file_digest
from .phases import Phase, RunnerContext
from .procfs import Proof, prove, read_json, signal_group
from .stops import SELF_FENCED, STOP_TYPES, StopIntent, classify
from .tasks import TaskPaths, TaskRecord

log = logging.getLogger(__name__)

T = pb.RuntimeEventType
SIGNALLED = pb.RUNTIME_EVENT_TYPE_SIGNALLED
#: An Inspect's answer: (state, terminal type, exit code).
InspectAnswer = tuple[pb.InspectState.ValueType, T.ValueType, int | None]


class TaskRunner:
    def __init__(self, record: TaskRecord, paths: TaskPaths, ctx: RunnerContext) -> None:
        self.record = record
        self.paths = paths
        self._ctx = ctx
        self.phase = Phase.QUEUED
        self.result: tuple[T.ValueType, int | None] | None = None
        self.done = asyncio.Event()
        self.stop = StopIntent.load(paths.stop)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._launches = Launches(record, paths, ctx)
        self._local_counts: dict[int, int] = {}
        meta = ctx.outbox.meta(record.attempt_id) if record.attempt_id else {}
        self._tailer = ctx.tailer(paths, int(meta.get("log_offset", 0)))
        if self.stop and self.stop.term_sent_at is None and self.count(SIGNALLED) > 0:
            self.stop.term_sent_at = self.stop.requested_at  # signalled; stop.json lagged

    # -- events ----------------------------------------------------------------------------

    def emit(
        self, event_type: T.ValueType, meta: dict[str, Any] | None = None, **fields: Any
    ) -> pb.RuntimeEvent | None:
        """Write an event to the outbox (manual tasks have no events: only counted)."""
        if self.record.manual:
            self._local_counts[event_type] = self._local_counts.get(event_type, 0) + 1
            return None
        r = self.record
        event = make_event(
            r.attempt_id,
            r.task_id,
            r.callback_token,
            event_type,
            trace_parent=r.trace_parent,
            **fields,
        )
        return self._ctx.outbox.append(event, meta)

    def count(self, event_type: T.ValueType) -> int:
        if self.record.manual:
            return self._local_counts.get(event_type, 0)
        return self._ctx.outbox.count(self.record.attempt_id, event_type)

    @property
    def last_seq(self) -> int:
        return self._ctx.outbox.last_seq(self.record.attempt_id) if self.record.attempt_id else 0

    # -- lifecycle -------------------------------------------------------------------------

    def accept(self) -> int:
        """The ACCEPTED event (seq 1): taken, queued locally, not running."""
        event = self.emit(pb.RUNTIME_EVENT_TYPE_ACCEPTED)
        return event.seq if event is not None else 0

    def recover(self) -> Phase:
        """After a restart: the phase the files prove, and re-attach if a launch happened."""
        if self.record.manual and self.paths.status.exists() and self.paths.handle.exists():
            self._settle(classify(read_json(self.paths.status) or {}, self.stop)[:2])
        elif any(self.count(t) for t in TERMINAL_TYPES):
            meta = self._ctx.outbox.meta(self.record.attempt_id)
            self._settle((meta.get("terminal", 0), meta.get("exit_code")))
        elif self.paths.launch.exists():
            self.phase = Phase.LAUNCHING
            if self._unaccounted():
                self._lost()  # before the first heartbeat could list it as active
            else:
                self._start_monitor()
        elif self.last_seq == 0 and not self.record.manual:
            self.accept()  # the agent stopped between task.json and its ACCEPTED event
        return self.phase

    def launch(self) -> None:
        """QUEUED -> LAUNCHING: start the supervisor (it starts the command)."""
        self.phase = Phase.LAUNCHING
        if self._started(self._launches.start(1)):
            self._start_monitor()

    def _relaunch(self, summary: str) -> bool:
        """The launch provably never ran the command: launch it again (launches.py), unless
        a stop was asked for or the launches are used up; False when it ended (reported)."""
        number = self._launches.number
        if self.stop is not None or number >= MAX_LAUNCHES:
            self._unstarted(f"{summary} (launch {number} of {MAX_LAUNCHES})")
            return False
        log.warning("task %s: %s; launching it again", self.record.key, summary)
        return self._started(self._launches.again())

    def _started(self, error: OSError | None) -> bool:
        if error is None:
            return True
        log.error("task %s: cannot start a supervisor: %s", self.record.key, error)
        self._unstarted(f"cannot start the supervisor: {error}")
        return False

    def finish_unstarted(
        self, event_type: T.ValueType, error_code: str = "", summary: str = ""
    ) -> None:
        """Terminal evidence for a task whose command never ran (no exit code)."""
        meta = _terminal(event_type, None)
        self.emit(event_type, error_code=error_code, error_summary=summary, meta=meta)
        self._settle((event_type, None))

    def request_cancel(self, grace_ms: int) -> bool:
        """Cancel a launched task; False when it cannot be proven to be ours (nothing sent)."""
        if self.phase is Phase.FINISHED:
            return True
        if self.phase is Phase.LOST:
            return False
        if self.phase is Phase.RUNNING and self.stop is None:
            handle = read_json(self.paths.handle) or {}
            if prove(handle) is Proof.GONE and not self.paths.status.exists():
                return False
        if self.stop is None:
            self._set_stop("cancel", grace_ms)
            if self.phase is Phase.RUNNING:
                self._advance_stop()
        self._wake.set()
        return True

    async def close(self) -> None:
        """Stop following the task (the agent stops); the supervisor and command go on."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # -- inspect ---------------------------------------------------------------------------

    async def inspect(self) -> InspectAnswer:
        """What the files prove now: (state, terminal type, exit code). A command that just
        ended (its supervisor has not written the status yet, or the monitor has not written
        the rest of its output and its terminal event yet) is waited for, briefly."""
        deadline = time.monotonic() + 2.0
        while (answer := self._inspect_once()) is None and time.monotonic() < deadline:
            await asyncio.sleep(self._ctx.poll_s)
        return answer or (pb.INSPECT_STATE_UNSPECIFIED, pb.RUNTIME_EVENT_TYPE_UNSPECIFIED, None)

    def _inspect_once(self) -> InspectAnswer | None:
        none = pb.RUNTIME_EVENT_TYPE_UNSPECIFIED
        if self.phase is Phase.FINISHED and self.result is not None:
            return pb.INSPECT_STATE_FINISHED, self.result[0], self.result[1]
        if self.phase is Phase.LOST:
            return pb.INSPECT_STATE_LOST, none, None
        if (finished := self._recorded_finish()) is not None:
            return self._once_followed(finished)
        handle = read_json(self.paths.handle)
        if handle is None or not handle.get("exec_confirmed"):
            # Accepted (queued or launching), not running yet.
            return pb.INSPECT_STATE_ACCEPTED, none, None
        proof = prove(handle)
        if proof is Proof.ALIVE:
            return pb.INSPECT_STATE_RUNNING, none, None
        if proof is Proof.EXITED or self._launches.supervisor_may_live():
            # Ours and ended, or reaped by its supervisor: the status comes next.
            return None
        # The supervisor is gone too: the status it wrote just before exiting, or nothing.
        # The task was ours and nothing accounts for it: lost, not "never had it".
        return self._once_followed(self._recorded_finish() or (pb.INSPECT_STATE_LOST, none, None))

    def _once_followed(self, answer: InspectAnswer) -> InspectAnswer | None:
        """``answer`` (the task ended), or None while the monitor still follows the task: it
        has yet to write what is left of the output and the terminal event (or mark it lost),
        so it is woken to do that now and the answer waits for it. The answer's ``last_seq``
        must cover those events: truerun ends the attempt on a FINISHED that says nothing is
        left to send, and would then drop them as late, output included."""
        if self._task is not None and not self._task.done():
            self._wake.set()
            return None
        return answer

    def _recorded_finish(self) -> InspectAnswer | None:
        status = read_json(self.paths.status)
        if status is None:
            return None
        terminal, code, _, _ = classify(status, self.stop)
        return pb.INSPECT_STATE_FINISHED, terminal, code

    # -- following the command -------------------------------------------------------------

    def _start_monitor(self) -> None:
        self._task = asyncio.create_task(self._monitor(), name=f"task {self.record.key}")

    async def _monitor(self) -> None:
        try:
            if await self._await_exec():
                await self._follow()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("following task %s failed; it keeps its slot", self.record.key)

    async def _await_exec(self) -> bool:
        """Until the supervisor confirms the exec (RUNNING) or the launch provably failed."""
        while True:
            self._launches.reap()
            handle = read_json(self.paths.handle)
            if handle is not None and handle.get("abandoned"):
                if not self._relaunch("the supervisor did not start the command"):
                    return False
                continue
            if handle is not None and handle.get("exec_confirmed"):
                self._running()
                return True
            if self.paths.status.exists():
                return True  # exec failed (or it ended before the agent came back)
            if handle is None and (
                self.stop is not None or not self._launches.supervisor_may_live()
            ):
                if self._launches.abandon() and not self._relaunch(
                    "the supervisor died before starting the command"
                ):
                    return False
                continue
            if handle is not None and not self._launches.supervisor_may_live():
                self._lost()
                return False
            await self._sleep()

    async def _follow(self) -> None:
        while (status := read_json(self.paths.status)) is None:
            self._launches.reap()
            self._pump_output(final=False)
            self._enforce()
            handle = read_json(self.paths.handle) or {}
            if prove(handle) is Proof.GONE and not self._launches.supervisor_may_live():
                status = read_json(self.paths.status)  # written just before it exited?
                if status is None:
                    self._lost()
                    return
                break
            await self._sleep()
        self._launches.reap()
        self._pump_output(final=True)
        terminal, code, error_code, summary = classify(status, self.stop)
        payload: dict[str, Any] = file_digest(self.paths.log)
        if status.get("signal"):
            payload["signal"] = status["signal"]
        self.emit(
            terminal,
            exit_code=code,
            error_code=error_code,
            error_summary=summary,
            payload=payload,
            meta=_terminal(terminal, code),
        )
        self._settle((terminal, code))

    def _running(self) -> None:
        self.phase = Phase.RUNNING
        if self.count(pb.RUNTIME_EVENT_TYPE_RUNNING) == 0:
            self.emit(pb.RUNTIME_EVENT_TYPE_RUNNING, turn_status=pb.TURN_STATUS_ACTIVE)
        self._ctx.on_change()

    def _pump_output(self, *, final: bool) -> None:
        if self.record.manual:
            return
        for chunk in self._tailer.pump(final=final):
            self.emit(
                pb.RUNTIME_EVENT_TYPE_OUTPUT,
                payload=chunk.payload(),
                meta={"log_offset": chunk.end},
            )

    def _enforce(self) -> None:
        """Start a stop when the timeout passed or truerun was unreachable too long."""
        if self.stop is None:
            handle = read_json(self.paths.handle) or {}
            started = float(handle.get("started_at", time.time()))
            fence = self.record.self_fence_after_ms
            if self.record.timeout_s is not None and time.time() >= started + self.record.timeout_s:
                self._set_stop("timeout", self.record.grace_ms)
            elif fence > 0 and self._ctx.unreachable_ms() >= fence:
                log.warning(
                    "task %s: truerun unreachable for %d ms, self-fencing", self.record.key, fence
                )
                self._set_stop("self_fence", None)
        if self.stop is not None:
            self._advance_stop()

    def _set_stop(self, reason: str, grace_ms: int | None) -> None:
        grace = self._ctx.default_grace_ms if grace_ms is None or grace_ms <= 0 else grace_ms
        self.stop = StopIntent(reason, grace, time.time())
        self.stop.save(self.paths.stop)

    def _advance_stop(self) -> None:
        """The due signal, only to a proven handle, each with a SIGNALLED event."""
        stop = self.stop
        assert stop is not None
        now = time.time()
        signum = stop.next_signal(now)
        if signum is None or not signal_group(read_json(self.paths.handle) or {}, signum):
            return  # nothing due, or gone, or not provably ours: never signal it
        payload = {"signal": signum.name, "reason": stop.reason, "grace_ms": stop.grace_ms}
        self.emit(SIGNALLED, payload=payload)
        stop.sent(signum, now)
        stop.save(self.paths.stop)

    # -- helpers ---------------------------------------------------------------------------

    def _unstarted(self, summary: str) -> None:
        if self.stop is not None:
            terminal = STOP_TYPES[self.stop.reason]
            code = SELF_FENCED if self.stop.reason == "self_fence" else ""
            self.finish_unstarted(terminal, code, "stopped before the command started")
        else:
            self.finish_unstarted(pb.RUNTIME_EVENT_TYPE_FAILED, "SUPERVISOR_FAILED", summary)

    def _unaccounted(self) -> bool:
        """Launched, and nothing accounts for it any more: the handle proves no process,
        the supervisor is gone and wrote no exit status (the whole worker died)."""
        handle = read_json(self.paths.handle)
        if handle is None or handle.get("abandoned") or self.paths.status.exists():
            return False  # never launched, or provably never ran, or it has its status
        if prove(handle) is Proof.ALIVE or self._launches.supervisor_may_live():
            return False
        return not self.paths.status.exists()  # written just before the supervisor exited?

    def _lost(self) -> None:
        log.warning("task %s: neither alive nor finished by any evidence; lost", self.record.key)
        self.phase = Phase.LOST
        self.done.set()
        self._ctx.on_change()

    def _settle(self, result: tuple[T.ValueType, int | None]) -> None:
        self.result = result
        self.phase = Phase.FINISHED
        self.done.set()
        self._ctx.on_change()

    async def _sleep(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self._ctx.poll_s)
        self._wake.clear()


def _terminal(event_type: int, exit_code: int | None) -> dict[str, Any]:
    return {"terminal": event_type, "exit_code": exit_code}
