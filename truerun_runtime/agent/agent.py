"""The reference runtime agent: runs truerun's attempts (and manual local tasks) as local
processes, each under its own supervisor, within a hard local limit D."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from truerun.v1 import capacity_service_pb2 as cpb
from truerun.v1 import runtime_service_pb2 as pb

from truerun_runtime import Outbox, RuntimeClient

from . import secrets
from .config import AgentConfig
from .launches import spawn_supervisor
from .output import OutputTailer
from .phases import OCCUPYING, Phase, RunnerContext
from .runner import TaskRunner
from .tasks import SpecError, TaskPaths, TaskRecord, parse_spec, spec_dict
from .version import AGENT_VERSION
from .workspace import WorkspaceError, prepare_worktree

log = logging.getLogger(__name__)

SOCKET = "agent.sock"


class AgentBusy(Exception):
    """Another agent holds this state dir."""


class RuntimeRefused(Exception):
    """truerun refused this runtime for good (its token, or another owner's instance id)."""


class Agent:
    """Implements the SDK's RuntimeHandler; ``run()`` until ``stop()``."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(config.state_dir, 0o700)
        self._lock_fd = _lock(config.state_dir)
        self.instance_id, self.starts = config.resolved_identity()
        self.tasks_dir = config.state_dir / "tasks"
        self.tasks_dir.mkdir(exist_ok=True, mode=0o700)
        self.secrets_dir = config.secrets_dir or config.state_dir / "secrets"
        self.socket_path = config.state_dir / SOCKET
        self.outbox = Outbox(config.state_dir / "outbox", fsync=config.fsync)
        self.starts.void_unless_received(self.outbox.attempts())  # e.g. after a downgrade
        self.client = RuntimeClient(
            config.server,
            config.token,
            config.owner_id,
            self.instance_id,
            config.route_protos(self.instance_id),
            self,
            outbox=self.outbox,
            agent_version=AGENT_VERSION,
            lineage=config.lineage,
            backoff=config.backoff,
            keepalive_ms=config.keepalive_ms,
            credentials=config.credentials,
        )
        self.runners: dict[str, TaskRunner] = {}
        self.queue: list[TaskRunner] = []
        self._last_order = 0
        self._stopped = asyncio.Event()
        self._pump_scheduled = False
        self._ctx = RunnerContext(
            outbox=self.outbox,
            poll_s=config.poll_s,
            default_grace_ms=config.default_grace_ms,
            tailer=self._tailer,
            unreachable_ms=self.client.unreachable_ms,
            on_change=self._changed,
            spawn_supervisor=self._spawn_supervisor,
            launch_timeout_s=config.launch_timeout_s,
        )

    # -- running ---------------------------------------------------------------------------

    async def run(self) -> None:
        from .local import serve_local  # the socket server needs the running loop

        client: asyncio.Task[None] | None = None
        server: asyncio.Server | None = None
        try:
            self.recover()
            server = await serve_local(self, self.socket_path)
            client = asyncio.create_task(self.client.run(), name="runtime client")
            stopped = asyncio.create_task(self._stopped.wait())
            await asyncio.wait({client, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if self.client.refused:
                raise RuntimeRefused(self.client.refused)
        finally:
            self.client.stop()
            if server is not None:
                server.close()
                self.socket_path.unlink(missing_ok=True)
            if client is not None:
                await asyncio.gather(client, return_exceptions=True)
            await asyncio.gather(*(r.close() for r in self.runners.values()))
            os.close(self._lock_fd)

    def stop(self) -> None:
        """Stop the agent. Commands and their supervisors go on; a new agent re-attaches."""
        self._stopped.set()

    def recover(self) -> None:
        """Re-attach to every task in the state dir (no state is reset, nothing re-run)."""
        for directory in sorted(p for p in self.tasks_dir.iterdir() if p.is_dir()):
            paths = TaskPaths(directory)
            record = paths.load()
            if record is None:
                continue  # died while accepting: no ACCEPTED was written, nothing started
            runner = TaskRunner(record, paths, self._ctx)
            self._last_order = max(self._last_order, abs(record.order_key))
            phase = runner.recover()
            if phase is Phase.FINISHED and self._expired(runner):
                self._prune(runner)
                continue
            self.runners[record.key] = runner
            if phase is Phase.QUEUED:
                self.queue.append(runner)
        self.queue.sort(key=lambda r: r.record.order_key)
        log.info("recovered %d tasks (%d queued)", len(self.runners), len(self.queue))
        self._pump()

    def _expired(self, runner: TaskRunner) -> bool:
        """Finished, every event acknowledged, and untouched for the retention period."""
        attempt = runner.record.attempt_id
        if attempt and self.outbox.acked_seq(attempt) < self.outbox.last_seq(attempt):
            return False
        newest = max((p.stat().st_mtime for p in runner.paths.dir.iterdir()), default=0.0)
        return time.time() - newest > self.config.retention_s

    def _prune(self, runner: TaskRunner) -> None:
        """Forget a finished task: its dir (log included) and its outbox journal. Worktrees
        stay, and so does its record in the Start journal (Inspect: NOT_FOUND, not "never
        received")."""
        shutil.rmtree(runner.paths.dir, ignore_errors=True)
        if runner.record.attempt_id:
            self.outbox.forget(runner.record.attempt_id)

    # -- RuntimeHandler --------------------------------------------------------------------

    async def on_start(self, start: pb.Start) -> pb.StartResult:
        # first of all, before any answer or refusal: a Start that arrived (duplicate, invalid
        # and refused ones too) is on disk, so Inspect never calls it "never received"
        self.starts.record(start.attempt_id)

        def answer(accepted: bool, reason: str = "", seq: int = 0) -> pb.StartResult:
            return pb.StartResult(
                attempt_id=start.attempt_id,
                runtime_task_id=start.runtime_task_id,
                accepted=accepted,
                reason=reason,
                seq=seq,
            )

        def never(reason: str) -> pb.StartResult:
            """A refusal the same Start would get again: the spec can never run here."""
            refused = answer(False, reason)
            refused.refusal = pb.START_REFUSAL_INVALID_SPEC
            return refused

        known = self.runners.get(start.attempt_id)
        if known is not None:  # truerun never sends a Start twice; answer as before
            same = known.record.task_id == start.runtime_task_id
            return answer(same, "" if same else "attempt known with another runtime task id", 1)
        if not start.attempt_id or not start.runtime_task_id or not start.callback_token:
            return never("Start needs attempt_id, runtime_task_id and callback_token")
        try:
            spec = parse_spec(spec_dict(start))
            cwd = await prepare_worktree(start.workspace_path) if start.workspace_path else None
        except (SpecError, WorkspaceError) as error:
            return never(str(error))
        if absent := secrets.missing(spec.secret_env, self.secrets_dir):
            return never(f"secret {', '.join(absent)} is not available on this runtime")
        paths = TaskPaths.for_key(self.tasks_dir, start.attempt_id)
        record = TaskRecord(
            task_id=start.runtime_task_id,
            attempt_id=start.attempt_id,
            run_id=start.run_id,
            callback_token=start.callback_token,
            argv=spec.argv,
            cwd=str(cwd or paths.work),
            env={**spec.env, **self.config.server_env()} if spec.long_task else spec.env,
            order_key=self._order_key(start.front_of_queue),
            accepted_at=time.time(),
            timeout_s=spec.timeout_s,
            grace_ms=spec.grace_ms,
            self_fence_after_ms=max(0, start.self_fence_after_ms)
            or self.config.self_fence_after_ms,
            trace_parent=start.trace_parent,
            secret_env=spec.secret_env,
            long_task=spec.long_task,
        )
        runner = self._add(record, paths)
        seq = runner.accept()
        self._enqueue(runner)
        return answer(True, seq=seq)

    async def on_cancel(self, cancel: pb.Cancel) -> pb.CancelResult:
        runner = self.runners.get(cancel.attempt_id)
        found = False
        if runner is not None and runner.record.task_id == cancel.runtime_task_id:
            if runner.phase is Phase.QUEUED:
                self.queue.remove(runner)
                runner.finish_unstarted(pb.RUNTIME_EVENT_TYPE_CANCELLED)
                found = True
            else:
                grace = cancel.grace_ms if cancel.grace_ms > 0 else self.config.default_grace_ms
                found = runner.request_cancel(grace)
        return pb.CancelResult(
            attempt_id=cancel.attempt_id, runtime_task_id=cancel.runtime_task_id, found=found
        )

    async def on_inspect(self, inspect: pb.Inspect) -> pb.InspectResult:
        result = pb.InspectResult(
            attempt_id=inspect.attempt_id,
            runtime_task_id=inspect.runtime_task_id,
            state=pb.INSPECT_STATE_NOT_FOUND,
        )
        runner = self.runners.get(inspect.attempt_id)
        if runner is None and self.starts.never_received(inspect.attempt_id):
            result.state = pb.INSPECT_STATE_NEVER_RECEIVED  # truerun requeues the same attempt
            return result
        if runner is None or runner.record.task_id != inspect.runtime_task_id:
            return result
        state, terminal, code = await runner.inspect()
        result.state = state
        result.last_seq = runner.last_seq
        if state == pb.INSPECT_STATE_RUNNING:
            result.turn_status = pb.TURN_STATUS_ACTIVE
        if state == pb.INSPECT_STATE_FINISHED:
            result.terminal_type = terminal
            if code is not None:
                result.exit_code = code
        return result

    def observe(self) -> cpb.Observation:
        """Every task holding a slot and every task in the local queue, by runtime task id:
        truerun renews the lease only of a task a heartbeat lists."""
        active = sorted({r.record.task_id for r in self.runners.values() if r.phase in OCCUPYING})
        return cpb.Observation(
            limit=self.config.limit,
            active=len(active),
            active_task_ids=active,
            queued=len(self.queue),
            queued_task_ids=[r.record.task_id for r in self.queue],
            labels=list(self.config.labels),
        )

    # -- manual tasks ----------------------------------------------------------------------

    def start_manual(self, argv: Sequence[str], cwd: str = "", front: bool = False) -> TaskRunner:
        """A local task: counts in active and in D like any other, but truerun has no row for
        it and it sends no events."""
        task_id = f"manual-{uuid.uuid4()}"
        paths = TaskPaths.for_key(self.tasks_dir, task_id)
        record = TaskRecord(
            task_id=task_id,
            attempt_id="",
            run_id="",
            callback_token="",
            argv=list(argv),
            cwd=cwd or str(paths.work),
            env={},
            order_key=self._order_key(front),
            accepted_at=time.time(),
        )
        runner = self._add(record, paths)
        self._enqueue(runner)
        return runner

    # -- the local queue -------------------------------------------------------------------

    def occupied(self) -> int:
        return sum(1 for r in self.runners.values() if r.phase in OCCUPYING)

    def _add(self, record: TaskRecord, paths: TaskPaths) -> TaskRunner:
        paths.create(record)
        paths.work.mkdir(exist_ok=True, mode=0o700)
        runner = TaskRunner(record, paths, self._ctx)
        self.runners[record.key] = runner
        return runner

    def _enqueue(self, runner: TaskRunner) -> None:
        self.queue.append(runner)
        self.queue.sort(key=lambda r: r.record.order_key)
        self._pump()

    def _order_key(self, front: bool) -> int:
        """Later keys queue later; "run now" keys are negative, the latest first."""
        self._last_order = max(self._last_order + 1, time.time_ns())
        return -self._last_order if front else self._last_order

    def _pump(self) -> None:
        """Launch from the head of the queue while fewer than D commands occupy a slot."""
        while self.queue and self.occupied() < self.config.limit:
            runner = self.queue.pop(0)
            fence = runner.record.self_fence_after_ms
            if fence > 0 and self.client.unreachable_ms() >= fence:
                runner.finish_unstarted(
                    pb.RUNTIME_EVENT_TYPE_FAILED, "SELF_FENCED", "truerun unreachable; not started"
                )
                continue
            runner.launch()
        self.client.request_heartbeat()

    def _changed(self) -> None:
        """A task took or freed a slot: refill the slots soon (not inside the caller)."""
        if not self._pump_scheduled:
            self._pump_scheduled = True
            asyncio.get_running_loop().call_soon(self._pump_soon)

    def _pump_soon(self) -> None:
        self._pump_scheduled = False
        self._pump()

    # -- processes -------------------------------------------------------------------------

    def _tailer(self, paths: TaskPaths, offset: int) -> OutputTailer:
        c = self.config
        return OutputTailer(
            paths.log,
            offset,
            chunk_bytes=c.output_chunk_bytes,
            chunks_per_pump=c.output_chunks_per_tick,
            max_backlog=c.output_max_backlog,
        )

    def _spawn_supervisor(self, record: TaskRecord, paths: TaskPaths) -> int:
        return spawn_supervisor(paths, self._child_env(record))

    def _child_env(self, record: TaskRecord) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "TRUERUN_TOKEN" and not k.startswith(secrets.ENV_PREFIX)
        }
        if record.long_task:  # the step driver dials truerun exactly as this agent does
            for name in self.config.tls_files.names:
                env.pop(name, None)
        env.update(record.env)
        for name, secret in record.secret_env.items():
            value = secrets.resolve(secret, self.secrets_dir)
            if value is None:  # gone since the Start: the launch fails, nothing runs
                raise OSError(f"secret {secret} is not available on this runtime")
            env[name] = value
        env["TRUERUN_RUNTIME_TASK_ID"] = record.task_id
        if not record.manual:
            env["TRUERUN_RUN_ID"] = record.run_id
            env["TRUERUN_ATTEMPT_ID"] = record.attempt_id
            env["TRUERUN_CALLBACK_TOKEN"] = record.callback_token
        return env


def _lock(state_dir: Path) -> int:
    """One agent per state dir (the kernel drops the lock if the agent dies)."""
    fd = os.open(state_dir / "agent.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AgentBusy(f"another agent runs on {state_dir}") from None
    return fd
