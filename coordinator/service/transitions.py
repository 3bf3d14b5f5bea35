"""The one way to change state: read -> decide -> compare-and-set + append, in one transaction.

Every service (the RunService API, the capacity claim, runtime ingest, the reconciler) calls
``Transitions``; nothing else writes a state column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace

from opentelemetry.trace import Span

from coordinator.domain import commands as c
from coordinator.domain.decide import Context, Decision, Outcome, RunWrite, decide
from coordinator.domain.model import Attempt, Run, RunEvent
from coordinator.domain.output import DEFAULT_OUTPUT_POLICY, OutputPolicy
from coordinator.domain.states import ScopePolicy
from coordinator.store.base import (
    CasMiss,
    DedupeKeyTaken,
    IdempotencyKeyTaken,
    Loaded,
    RequestRecord,
    RunStore,
    RunTx,
)
from kernel.errors import (
    ExecutionScopeBusy,
    IdempotencyKeyConflict,
    RunNotFound,
    VersionConflict,
)
from kernel.ids import new_token, now_ms, uuid7
from kernel.telemetry import current_traceparent, span

DEDUPLICATED = "deduplicated"


@dataclass(frozen=True, slots=True)
class Result:
    outcome: str  # an Outcome value, or DEDUPLICATED when the dedupe key was already used
    run: Run
    attempt: Attempt | None
    events: tuple[RunEvent, ...] = ()
    existing: bool = False  # CreateRun matched an idempotency key
    from_status: str = ""  # the run's status before (empty for a new run)


class Transitions:
    def __init__(
        self,
        store: RunStore,
        clock: Callable[[], int] = now_ms,
        new_id: Callable[[], str] = uuid7,
        token: Callable[[], str] = lambda: new_token("ls"),
        max_retries: int = 16,
        on_commit: Callable[[Result], None] | None = None,
        on_conflict: Callable[[str], None] | None = None,
        output: OutputPolicy = DEFAULT_OUTPUT_POLICY,
    ) -> None:
        self.store = store
        self._output = output
        self._clock = clock
        self._new_id = new_id
        self._token = token
        self._max_retries = max_retries
        self._on_commit = on_commit
        self._on_conflict = on_conflict

    def context(self) -> Context:
        """The clock and id sources decisions are made with (for batch callers)."""
        return self._context()

    def _context(self) -> Context:
        return Context(
            now_ms=self._clock(), new_id=self._new_id, new_token=self._token, output=self._output
        )

    async def create(
        self,
        spec: c.RunSpec,
        use_existing: bool = True,
        request: RequestRecord | None = None,
    ) -> Result:
        """Create a run; a known (project, idempotency key) follows the conflict policy."""
        with span("transition CreateRun", {"truerun.project_id": spec.project_id}) as current:
            if not spec.trace_parent:
                spec = replace(spec, trace_parent=current_traceparent())
            result = await self._create(spec, use_existing, request)
            _describe(current, result)
            return result

    async def _create(
        self, spec: c.RunSpec, use_existing: bool, request: RequestRecord | None
    ) -> Result:
        if spec.idempotency_key:
            existing = await self.store.find_by_idempotency_key(
                spec.project_id, spec.idempotency_key
            )
            if existing is not None:
                return self._existing(existing, use_existing)
        decision = decide(c.CreateRun(spec), None, None, self._context())
        try:
            if spec.execution_scope and spec.scope_policy is not ScopePolicy.QUEUE:
                return await self._create_in_scope(spec, decision, request)
            applied = await self.store.apply(decision, None, request)
        except IdempotencyKeyTaken:
            assert spec.idempotency_key is not None
            existing = await self.store.find_by_idempotency_key(
                spec.project_id, spec.idempotency_key
            )
            assert existing is not None, "the key was taken by a committed run"
            return self._existing(existing, use_existing)
        return self._committed(
            Result(decision.outcome.value, applied.run, applied.attempt, applied.events)
        )

    async def _create_in_scope(
        self, spec: c.RunSpec, decision: Decision, request: RequestRecord | None
    ) -> Result:
        """The scope collision policy, decided under the scope's lock: ``reject_new`` refuses
        the run while another one in the scope is not finished; ``cancel_in_progress`` asks
        every such run to cancel (the durable cancel path), and the new run then waits in the
        queue until the scope is free."""
        scope = spec.execution_scope
        assert scope is not None
        cancels: list[Result] = []
        async with self.store.transaction([f"scope:{scope}"]) as tx:
            open_runs = await tx.open_runs_in_scope(scope)
            if open_runs and spec.scope_policy is ScopePolicy.REJECT_NEW:
                raise ExecutionScopeBusy(
                    f"execution scope {scope!r} already has run {open_runs[0]}",
                    scope=scope,
                    run_id=open_runs[0],
                )
            for run_id in open_runs:
                cancel = c.RequestCancel(run_id, spec.created_by, reason="superseded_in_scope")
                cancels.append(await self.execute_in(tx, cancel))
            applied = await tx.apply(decision)
            if request is not None:
                await tx.put_request(request, applied)
        self.published(cancels)
        return self._committed(
            Result(decision.outcome.value, applied.run, applied.attempt, applied.events)
        )

    def _existing(self, existing: Loaded, use_existing: bool) -> Result:
        if not use_existing:
            raise IdempotencyKeyConflict(
                f"run {existing.run.id} already has this idempotency key",
                existing_run_id=existing.run.id,
            )
        return Result(Outcome.APPLIED.value, existing.run, existing.attempt, existing=True)

    async def execute(
        self,
        command: c.RunCommand | c.RuntimeCommand,
        request: RequestRecord | None = None,
    ) -> Result:
        """Apply one command. With an expected version a lost race is RUN_VERSION_CONFLICT;
        without one, the command is decided again on the fresh state (bounded)."""
        with _span_of(command) as current:
            result = await self._execute(command, request)
            _describe(current, result)
            return result

    async def _execute(
        self, command: c.RunCommand | c.RuntimeCommand, request: RequestRecord | None
    ) -> Result:
        dedupe_key = command.dedupe_key if isinstance(command, c.RunCommand) else None
        attempt_id = command.attempt_id if isinstance(command, c.RuntimeCommand) else None
        pinned_version = isinstance(command, c.RunCommand) and command.expected_version is not None
        for _ in range(self._max_retries):
            loaded = await self.store.load(command.run_id, attempt_id, dedupe_key)
            if loaded is None:
                raise RunNotFound(f"run {command.run_id} does not exist", run_id=command.run_id)
            if loaded.dedupe_hit:
                return Result(DEDUPLICATED, loaded.run, loaded.attempt)
            decision = decide(command, loaded.run, loaded.attempt, self._context())
            if decision.run_write is RunWrite.NONE:
                return Result(decision.outcome.value, decision.run, decision.attempt)
            try:
                applied = await self.store.apply(decision, dedupe_key, request)
            except CasMiss:
                if self._on_conflict is not None:
                    self._on_conflict(type(command).__name__)
                if pinned_version:
                    raise VersionConflict(
                        f"run {command.run_id} changed since version "
                        f"{getattr(command, 'expected_version', None)}",
                        run_id=command.run_id,
                    ) from None
                continue
            except DedupeKeyTaken:
                continue
            return self._committed(
                Result(
                    decision.outcome.value,
                    applied.run,
                    applied.attempt,
                    applied.events,
                    from_status=loaded.run.status.value,
                )
            )
        raise VersionConflict(
            f"run {command.run_id} kept changing; gave up after {self._max_retries} tries",
            run_id=command.run_id,
        )

    async def execute_in(self, tx: RunTx, command: c.RunCommand | c.RuntimeCommand) -> Result:
        """Apply one command inside a caller's transaction (a batch). Nothing is retried: a
        conflict raises and the caller's whole transaction rolls back. Call ``published``
        with the results once the transaction has committed."""
        with _span_of(command) as current:
            result = await self._execute_in(tx, command)
            _describe(current, result)
            return result

    async def _execute_in(self, tx: RunTx, command: c.RunCommand | c.RuntimeCommand) -> Result:
        attempt_id = command.attempt_id if isinstance(command, c.RuntimeCommand) else None
        loaded = await tx.load(command.run_id, attempt_id)
        if loaded is None:
            raise RunNotFound(f"run {command.run_id} does not exist", run_id=command.run_id)
        decision = decide(command, loaded.run, loaded.attempt, self._context())
        if decision.run_write is RunWrite.NONE:
            return Result(decision.outcome.value, decision.run, decision.attempt)
        try:
            applied = await tx.apply(decision)
        except CasMiss:
            raise VersionConflict(
                f"run {command.run_id} changed inside a locked batch", run_id=command.run_id
            ) from None
        return Result(
            decision.outcome.value,
            applied.run,
            applied.attempt,
            applied.events,
            from_status=loaded.run.status.value,
        )

    def published(self, results: Sequence[Result]) -> None:
        for result in results:
            self._committed(result)

    def _committed(self, result: Result) -> Result:
        if self._on_commit is not None:
            self._on_commit(result)
        return result


def _span_of(command: c.RunCommand | c.RuntimeCommand) -> AbstractContextManager[Span]:
    """One span per transition: the command, its run and attempt (ids only, never tokens)."""
    attributes = {"truerun.run_id": command.run_id}
    if isinstance(command, c.RuntimeCommand):
        attributes["truerun.attempt_id"] = command.attempt_id
    return span(f"transition {type(command).__name__}", attributes)


def _describe(current: Span, result: Result) -> None:
    current.set_attribute("truerun.run_id", result.run.id)
    current.set_attribute("truerun.outcome", result.outcome)
    current.set_attribute("truerun.run_status", result.run.status.value)
